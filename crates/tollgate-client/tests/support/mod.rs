//! Local hosts and the crawl, shared by the tests and the `crawl` example.

pub mod crawl;
pub mod hosts;
pub mod script;
