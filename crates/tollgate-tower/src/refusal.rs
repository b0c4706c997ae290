//! A refusal and its reasons: moved to tollgate-http, which tollgate-pingora shares.

pub(crate) use tollgate_http::grpc_content_type;
pub use tollgate_http::{Refusal, RefusalReason};
