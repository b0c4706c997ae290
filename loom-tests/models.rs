#![cfg(tollgate_loom)]
