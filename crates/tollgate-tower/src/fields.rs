//! The response fields: moved to tollgate-http, which tollgate-pingora shares.

pub use tollgate_http::PolicyNameError;
pub(crate) use tollgate_http::{Fields, Format, Policy};
