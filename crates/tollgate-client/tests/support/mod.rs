//! Local hosts and the crawl, shared by the tests and the `crawl` example; a test `metrics`
//! recorder and `tracing` subscriber.

pub mod crawl;
pub mod events;
pub mod hosts;
#[cfg(feature = "metrics")]
pub mod recorder;
pub mod script;
