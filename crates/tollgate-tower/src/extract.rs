//! What a key source is: moved to tollgate-http, which tollgate-pingora shares.

pub use tollgate_http::{KeyExtractor, KeyOr, NoKey, Or};
