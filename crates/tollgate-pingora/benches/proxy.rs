//! Placeholder until the side-by-side bench lands.

fn main() {}
