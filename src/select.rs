//! A select the compiler keeps free of branches, for values whose order no predictor could
//! learn.
//!
//! Why: LLVM's x86 backend turns a conditional move inside a loop back into a branch when it
//! judges the branch cheaper (its "cmov conversion"), and it did so for the locked probe's
//! running minimum over a run's TATs (`SlotArray::probe_locked`): a new least TAT comes
//! after a random number of slots, so that branch mispredicted 0.6 times an eviction at a
//! full table (callgrind, `benches/counters/run.sh evicting full`). Written here as a mask
//! the optimizer cannot see through, the select stays three register operations.

/// `a` if `pick`, else `b`, without a branch.
#[inline(always)]
pub(crate) fn select(pick: bool, a: u64, b: u64) -> u64 {
    let mask = 0u64.wrapping_sub(u64::from(pick));
    #[cfg(target_arch = "x86_64")]
    let mask = {
        let mut hidden = mask;
        // SAFETY: a template that is only a comment: no instruction, no memory, stack or
        // flags touched; the block only hides the mask's value (all ones or zero) from the
        // optimizer, so that it cannot turn the masking below back into a branch on `pick`.
        unsafe {
            std::arch::asm!(
                "/* {hidden} */",
                hidden = inout(reg) hidden,
                options(pure, nomem, nostack, preserves_flags),
            );
        }
        hidden
    };
    b ^ ((a ^ b) & mask)
}

#[cfg(test)]
mod tests {
    use super::select;

    #[test]
    fn picks_the_first_when_asked_and_the_second_otherwise() {
        for (a, b) in [(0, u64::MAX), (u64::MAX, 0), (7, 7), (1 << 63, 3)] {
            assert_eq!(select(true, a, b), a);
            assert_eq!(select(false, a, b), b);
        }
    }
}
