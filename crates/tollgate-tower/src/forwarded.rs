//! The forwarding headers' walk: moved to tollgate-http, which tollgate-pingora shares.

pub use tollgate_http::ForwardedHeader;
