//! What a connection wrapper ([`super::home::Homed`], [`super::replay::Replay`]) passes through
//! to the connection under it, written once.

/// `AsyncWrite` for `$ty`, every call forwarded to its field `$field`.
macro_rules! forward_async_write {
    ($ty:ty, $field:ident) => {
        impl tokio::io::AsyncWrite for $ty {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$field).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$field).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                tokio::io::AsyncWrite::is_write_vectored(&self.$field)
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$field).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$field).poll_shutdown(cx)
            }
        }
    };
}

/// Pingora's connection identity and digests for `$ty` (its id, TLS state, timings, proxy and
/// socket digests), read from the connection `self.$io()` and set on `self.$io_mut()`.
macro_rules! forward_digests {
    ($ty:ty, $io:ident, $io_mut:ident) => {
        impl pingora::protocols::UniqueID for $ty {
            fn id(&self) -> pingora::protocols::UniqueIDType {
                pingora::protocols::UniqueID::id(self.$io())
            }
        }

        impl pingora::protocols::Ssl for $ty {
            fn get_ssl(&self) -> Option<&pingora::protocols::tls::TlsRef> {
                pingora::protocols::Ssl::get_ssl(self.$io())
            }

            fn get_ssl_digest(&self) -> Option<std::sync::Arc<pingora::protocols::tls::SslDigest>> {
                pingora::protocols::Ssl::get_ssl_digest(self.$io())
            }

            fn selected_alpn_proto(&self) -> Option<pingora::protocols::ALPN> {
                pingora::protocols::Ssl::selected_alpn_proto(self.$io())
            }
        }

        impl pingora::protocols::GetTimingDigest for $ty {
            fn get_timing_digest(&self) -> Vec<Option<pingora::protocols::TimingDigest>> {
                pingora::protocols::GetTimingDigest::get_timing_digest(self.$io())
            }
        }

        impl pingora::protocols::GetProxyDigest for $ty {
            fn get_proxy_digest(
                &self,
            ) -> Option<std::sync::Arc<pingora::protocols::raw_connect::ProxyDigest>> {
                pingora::protocols::GetProxyDigest::get_proxy_digest(self.$io())
            }

            fn set_proxy_digest(&mut self, digest: pingora::protocols::raw_connect::ProxyDigest) {
                pingora::protocols::GetProxyDigest::set_proxy_digest(self.$io_mut(), digest)
            }
        }

        impl pingora::protocols::GetSocketDigest for $ty {
            fn get_socket_digest(
                &self,
            ) -> Option<std::sync::Arc<pingora::protocols::SocketDigest>> {
                pingora::protocols::GetSocketDigest::get_socket_digest(self.$io())
            }

            fn set_socket_digest(&mut self, digest: pingora::protocols::SocketDigest) {
                pingora::protocols::GetSocketDigest::set_socket_digest(self.$io_mut(), digest)
            }
        }
    };
}
