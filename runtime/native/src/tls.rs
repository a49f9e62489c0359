//! TLS on the gRPC port, as Triton's `--grpc-use-ssl` and `--grpc-use-ssl-mutual` give it: the server's certificate
//! chain and key, and for mutual TLS the roots a client's certificate must chain to (a client without one, or with
//! one they did not sign, fails the handshake). HTTP/2 is chosen by ALPN, which gRPC clients require of a TLS server.
//! Built from PEM bytes at start, so a file that is not what it should be fails the start, with its name; a
//! [`TlsSwitch`] then takes renewed files, for the connections that come after (those open keep theirs).

use std::sync::{Arc, RwLock};

use rustls::crypto::ring;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// The PEM text of what a TLS port serves with.
pub struct TlsFiles<'a> {
    /// The server's certificate, then any intermediates.
    pub certificate_chain: &'a [u8],
    /// The server's private key (PKCS#8, PKCS#1 or SEC1).
    pub private_key: &'a [u8],
    /// For mutual TLS: the certificates a client's must chain to.
    pub client_roots: Option<&'a [u8]>,
}

/// The server's TLS configuration for `files`, or what is wrong with them.
pub fn server_config(files: &TlsFiles<'_>) -> Result<Arc<ServerConfig>, String> {
    let chain = certificates(files.certificate_chain, "the server certificate")?;
    let key = PrivateKeyDer::from_pem_slice(files.private_key)
        .map_err(|e| format!("the server key: no private key in PEM form ({e})"))?;
    // ring (rustls deprecates it for its want of post-quantum key exchange): aws-lc-rs, which has it, is a C build
    // of its own on every fresh machine; ring's classical X25519 and P-256 key exchange every gRPC client offers
    #[allow(deprecated)]
    let provider = Arc::new(ring::default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let builder = match files.client_roots {
        None => builder.with_no_client_auth(),
        Some(pem) => {
            let mut roots = RootCertStore::empty();
            for root in certificates(pem, "the root certificate")? {
                roots
                    .add(root)
                    .map_err(|e| format!("the root certificate: {e}"))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .map_err(|e| format!("the root certificate: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|e| format!("the server certificate and key: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(Arc::new(config))
}

/// A TLS port's configuration, replaced whole when its files are renewed: each connection takes the one current
/// when it is accepted. Mutual TLS or not is fixed for the port's life, so a renewal cannot turn it off.
pub struct TlsSwitch {
    current: RwLock<Arc<ServerConfig>>,
    mutual: bool,
}

impl TlsSwitch {
    /// The switch serving with `files` until they are renewed (see [`server_config`] for the errors).
    pub fn new(files: &TlsFiles<'_>) -> Result<Self, String> {
        Ok(Self {
            current: RwLock::new(server_config(files)?),
            mutual: files.client_roots.is_some(),
        })
    }

    /// The configuration a connection accepted now handshakes with.
    pub fn current(&self) -> Arc<ServerConfig> {
        // a panic holding the lock can only be in `renew`'s assignment: what it guards is whole either way
        self.current
            .read()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .clone()
    }

    /// Serves the connections accepted from now on with `files`; what is wrong with them leaves the current
    /// configuration in place.
    pub fn renew(&self, files: &TlsFiles<'_>) -> Result<(), String> {
        if files.client_roots.is_some() != self.mutual {
            return Err(if self.mutual {
                "mutual TLS needs the root certificate".to_string()
            } else {
                "a port without mutual TLS takes no root certificate".to_string()
            });
        }
        let config = server_config(files)?;
        *self
            .current
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = config;
        Ok(())
    }
}

/// Every certificate in `pem`; an error naming `what` if there is none or one is not PEM.
fn certificates(pem: &[u8], what: &str) -> Result<Vec<CertificateDer<'static>>, String> {
    let found = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("{what}: not PEM ({e})"))?;
    if found.is_empty() {
        return Err(format!("{what}: no certificate in PEM form"));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CERT: &[u8] = include_bytes!("../testdata/server.crt");
    const KEY: &[u8] = include_bytes!("../testdata/server.key");
    const OTHER_KEY: &[u8] = include_bytes!("../testdata/other.key");

    fn files<'a>(
        certificate_chain: &'a [u8],
        private_key: &'a [u8],
        client_roots: Option<&'a [u8]>,
    ) -> TlsFiles<'a> {
        TlsFiles {
            certificate_chain,
            private_key,
            client_roots,
        }
    }

    #[test]
    fn a_certificate_and_its_key_serve_h2_by_alpn() {
        let config = server_config(&files(CERT, KEY, None)).unwrap();
        assert_eq!(config.alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn mutual_tls_takes_the_roots_clients_chain_to() {
        assert!(server_config(&files(CERT, KEY, Some(CERT))).is_ok());
    }

    #[test]
    fn a_renewal_replaces_the_configuration_and_a_bad_one_keeps_it() {
        let switch = TlsSwitch::new(&files(CERT, KEY, Some(CERT))).unwrap();
        let first = switch.current();
        switch.renew(&files(CERT, KEY, Some(CERT))).unwrap();
        let renewed = switch.current();
        assert!(!Arc::ptr_eq(&first, &renewed));
        for bad in [files(CERT, OTHER_KEY, Some(CERT)), files(CERT, KEY, None)] {
            assert!(switch.renew(&bad).is_err());
            assert!(Arc::ptr_eq(&switch.current(), &renewed));
        }
    }

    #[test]
    fn a_port_without_mutual_tls_takes_no_roots_at_renewal() {
        let switch = TlsSwitch::new(&files(CERT, KEY, None)).unwrap();
        let error = switch.renew(&files(CERT, KEY, Some(CERT))).unwrap_err();
        assert!(error.contains("takes no root certificate"), "{error}");
    }

    #[test]
    fn each_file_that_is_not_what_it_should_be_is_named() {
        let cases: [(TlsFiles<'_>, &str); 5] = [
            (
                files(b"", KEY, None),
                "the server certificate: no certificate",
            ),
            (
                files(KEY, KEY, None),
                "the server certificate: no certificate",
            ),
            (files(CERT, CERT, None), "the server key: no private key"),
            (
                files(CERT, OTHER_KEY, None),
                "the server certificate and key:",
            ),
            (
                files(CERT, KEY, Some(b"garbage")),
                "the root certificate: no certificate",
            ),
        ];
        for (files, expected) in cases {
            let error = server_config(&files).expect_err("refused");
            assert!(
                error.starts_with(expected),
                "{error:?} does not start with {expected:?}"
            );
        }
    }
}
