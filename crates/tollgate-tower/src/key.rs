//! Who is the client (the built-in key sources and trusted-proxy ranges): moved to
//! tollgate-http, which tollgate-pingora shares.

pub use tollgate_http::{
    Cidr, CidrError, ClientIp, ExtensionKey, Global, HeaderKey, HeaderKeyName, PeerIp, ip_key,
    peer_addr,
};
