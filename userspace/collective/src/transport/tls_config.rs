//! Mutual TLS settings and the loaded identity of this rank.
//!
//! `CAUSEWAY_TLS` = `wan` (connections across domains and the bootstrap
//! store), `all` (every TCP connection) or `off`; the default is `wan` when
//! `CAUSEWAY_TLS_CERT`, `CAUSEWAY_TLS_KEY` and `CAUSEWAY_TLS_CA` are set
//! (made by `causeway certs`), `off` otherwise. `CAUSEWAY_TLS_CA` is a PEM
//! bundle of the CAs this rank trusts (every domain's CA; each is
//! name-constrained to its own domain). A peer is accepted when its chain
//! ends at one of them and its certificate names the domain and host the
//! rendezvous says that rank has (`<host>.<domain>.causeway`, see
//! [`causeway_core::identity`]).
//!
//! `CAUSEWAY_KTLS` = `auto` (default), `on` or `off`: whether a data link's
//! records are encrypted by the kernel (kTLS, see [`super::ktls`]) once
//! rustls has finished the handshake.
//!
//! `CAUSEWAY_STORE_ID` = `<host>.<domain>` pins the bootstrap store's
//! certificate to that host (normally rank 0's): the store client then checks
//! the name `<host>.<domain>.causeway` as well as the chain. Unset, any
//! certificate of a trusted CA may serve the store (which host serves it is
//! otherwise learned only through the store itself).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::{ring as provider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::{
    ClientConfig, ClientConnection, Connection, DigitallySignedStruct, RootCertStore, ServerConfig,
    ServerConnection, SignatureScheme,
};

use crate::error::{ConfigError, TlsError};

/// Which connections are encrypted and authenticated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TlsMode {
    #[default]
    Off,
    /// Across domains, and the bootstrap store.
    Wan,
    /// Every TCP connection (shared memory stays as it is).
    All,
}

/// Whether the kernel encrypts a data link's records (kTLS) after the
/// rustls handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KtlsMode {
    /// When the kernel has the `tls` upper layer protocol; rustls otherwise
    /// (logged once).
    #[default]
    Auto,
    /// Always: a link where the kernel cannot take over fails with
    /// [`TlsError::Ktls`].
    On,
    /// Never: rustls encrypts in userspace.
    Off,
}

impl KtlsMode {
    /// Reads `CAUSEWAY_KTLS` (`auto` when unset).
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::parse(std::env::var("CAUSEWAY_KTLS").ok().as_deref())
    }

    /// A value of `CAUSEWAY_KTLS` (`None`: unset).
    pub fn parse(v: Option<&str>) -> Result<Self, ConfigError> {
        match v {
            None | Some("" | "auto") => Ok(KtlsMode::Auto),
            Some("on") => Ok(KtlsMode::On),
            Some("off") => Ok(KtlsMode::Off),
            Some(v) => Err(ConfigError::InvalidVar {
                name: "CAUSEWAY_KTLS".into(),
                value: v.into(),
                reason: "expected auto, on or off".into(),
            }),
        }
    }
}

/// Where this rank's certificate, key and trusted CAs are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
}

/// `CAUSEWAY_TLS*`, as [`crate::Options::tls`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TlsSettings {
    pub mode: TlsMode,
    pub files: Option<TlsFiles>,
    /// `CAUSEWAY_KTLS`.
    pub ktls: KtlsMode,
    /// `CAUSEWAY_STORE_ID`: the host whose certificate must serve the store.
    pub store: Option<StoreId>,
}

/// The host that must serve the bootstrap store (`CAUSEWAY_STORE_ID=<host>.<domain>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreId {
    pub domain: String,
    pub host: String,
}

impl StoreId {
    /// Parses `<host>.<domain>` (two DNS labels, as `causeway certs issue` names them).
    pub fn parse(v: &str) -> Result<Self, ConfigError> {
        let bad = |reason: String| ConfigError::InvalidVar {
            name: "CAUSEWAY_STORE_ID".into(),
            value: v.into(),
            reason,
        };
        let (host, domain) = v
            .split_once('.')
            .ok_or_else(|| bad("expected <host>.<domain>, e.g. node1.dc1".into()))?;
        causeway_core::identity::host_name(domain, host).map_err(|e| bad(e.to_string()))?;
        Ok(StoreId {
            domain: domain.into(),
            host: host.into(),
        })
    }
}

impl TlsSettings {
    /// `mode` with these files.
    pub fn new(mode: TlsMode, files: TlsFiles) -> Self {
        TlsSettings {
            mode,
            files: Some(files),
            ktls: KtlsMode::default(),
            store: None,
        }
    }

    /// The same with `ktls`.
    pub fn with_ktls(self, ktls: KtlsMode) -> Self {
        TlsSettings { ktls, ..self }
    }

    /// The same with the store pinned to `store`'s certificate.
    pub fn with_store(self, store: StoreId) -> Self {
        TlsSettings {
            store: Some(store),
            ..self
        }
    }

    /// Reads `CAUSEWAY_TLS`, `CAUSEWAY_TLS_CERT`, `CAUSEWAY_TLS_KEY`,
    /// `CAUSEWAY_TLS_CA`, `CAUSEWAY_KTLS` and `CAUSEWAY_STORE_ID`.
    pub fn from_env() -> Result<Self, ConfigError> {
        let var = |n: &str| std::env::var(n).ok().filter(|v| !v.is_empty());
        let paths = [
            var("CAUSEWAY_TLS_CERT"),
            var("CAUSEWAY_TLS_KEY"),
            var("CAUSEWAY_TLS_CA"),
        ];
        let files =
            match paths {
                [Some(cert), Some(key), Some(ca)] => Some(TlsFiles {
                    cert: cert.into(),
                    key: key.into(),
                    ca: ca.into(),
                }),
                [None, None, None] => None,
                _ => return Err(ConfigError::Invalid(
                    "set all of CAUSEWAY_TLS_CERT, CAUSEWAY_TLS_KEY and CAUSEWAY_TLS_CA, or none"
                        .into(),
                )),
            };
        let mode = match var("CAUSEWAY_TLS").as_deref() {
            None if files.is_some() => TlsMode::Wan,
            None | Some("off") => TlsMode::Off,
            Some("wan") => TlsMode::Wan,
            Some("all") => TlsMode::All,
            Some(v) => {
                return Err(ConfigError::InvalidVar {
                    name: "CAUSEWAY_TLS".into(),
                    value: v.into(),
                    reason: "expected wan, all or off".into(),
                })
            }
        };
        if mode != TlsMode::Off && files.is_none() {
            return Err(ConfigError::Invalid(
                "CAUSEWAY_TLS is on but CAUSEWAY_TLS_CERT, CAUSEWAY_TLS_KEY, CAUSEWAY_TLS_CA are not set (make them with `causeway certs`)".into(),
            ));
        }
        let ktls = KtlsMode::from_env()?;
        let store = var("CAUSEWAY_STORE_ID")
            .map(|v| StoreId::parse(&v))
            .transpose()?;
        Ok(TlsSettings {
            mode,
            files,
            ktls,
            store,
        })
    }

    /// The loaded identity, or `None` when TLS is off.
    pub fn load(&self) -> Result<Option<Arc<TlsContext>>, TlsError> {
        match (&self.files, self.mode) {
            (Some(f), TlsMode::Wan | TlsMode::All) => {
                let mut ctx = TlsContext::load(self.mode, f)?;
                ctx.ktls = self.ktls;
                if let Some(id) = &self.store {
                    ctx.store_name = Some(peer_name(&id.domain, &id.host)?);
                }
                Ok(Some(Arc::new(ctx)))
            }
            _ => Ok(None),
        }
    }
}

/// This rank's certificate and key and the CAs it trusts, ready for handshakes.
#[derive(Debug)]
pub struct TlsContext {
    pub mode: TlsMode,
    /// Whether data links hand their records to the kernel after the handshake.
    pub ktls: KtlsMode,
    /// Verifies a peer's chain and name (`<host>.<domain>.causeway`).
    pub(crate) client: Arc<ClientConfig>,
    /// Verifies only the chain (the bootstrap store's certificate: which
    /// host serves it is not known before the rendezvous).
    pub(crate) store_client: Arc<ClientConfig>,
    /// `CAUSEWAY_STORE_ID`: when set, the store is dialled with [`Self::client`]
    /// and must present a certificate with this name.
    pub store_name: Option<ServerName<'static>>,
    /// Requires a client certificate chaining to a trusted CA.
    pub(crate) server: Arc<ServerConfig>,
}

impl TlsContext {
    /// Loads the files; every TLS 1.3 cipher suite of ring is offered.
    pub fn load(mode: TlsMode, f: &TlsFiles) -> Result<Self, TlsError> {
        Self::load_with(mode, f, provider::default_provider())
    }

    /// Loads the files offering only `suites` (benchmarks, tests).
    pub fn load_with_suites(
        mode: TlsMode,
        f: &TlsFiles,
        suites: &[rustls::SupportedCipherSuite],
    ) -> Result<Self, TlsError> {
        let p = rustls::crypto::CryptoProvider {
            cipher_suites: suites.to_vec(),
            ..provider::default_provider()
        };
        Self::load_with(mode, f, p)
    }

    fn load_with(
        mode: TlsMode,
        f: &TlsFiles,
        p: rustls::crypto::CryptoProvider,
    ) -> Result<Self, TlsError> {
        let bad = |path: &Path, reason: String| TlsError::File {
            path: path.display().to_string(),
            reason,
        };
        let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&f.cert)
            .and_then(|i| i.collect())
            .map_err(|e| bad(&f.cert, e.to_string()))?;
        if chain.is_empty() {
            return Err(bad(&f.cert, "no CERTIFICATE in it".into()));
        }
        let key = PrivateKeyDer::from_pem_file(&f.key).map_err(|e| bad(&f.key, e.to_string()))?;
        let mut roots = RootCertStore::empty();
        let cas: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&f.ca)
            .and_then(|i| i.collect())
            .map_err(|e| bad(&f.ca, e.to_string()))?;
        for ca in cas {
            roots
                .add(ca)
                .map_err(|e| bad(&f.ca, format!("not a usable CA certificate: {e}")))?;
        }
        if roots.is_empty() {
            return Err(bad(&f.ca, "no CA CERTIFICATE in it".into()));
        }
        let roots = Arc::new(roots);
        let p = Arc::new(p);
        let versions = &[&rustls::version::TLS13];
        let cfg = |e: rustls::Error| bad(&f.cert, e.to_string());
        let server_verifier = WebPkiServerVerifier::builder_with_provider(roots.clone(), p.clone())
            .build()
            .map_err(|e| bad(&f.ca, e.to_string()))?;
        let client_verifier = WebPkiClientVerifier::builder_with_provider(roots.clone(), p.clone())
            .build()
            .map_err(|e| bad(&f.ca, e.to_string()))?;
        let client_cfg = |verifier: Arc<dyn ServerCertVerifier>| -> Result<_, TlsError> {
            let mut c = ClientConfig::builder_with_provider(p.clone())
                .with_protocol_versions(versions)
                .map_err(cfg)?
                .dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_client_auth_cert(chain.clone(), key.clone_key())
                .map_err(cfg)?;
            c.resumption = rustls::client::Resumption::disabled();
            // kTLS: the traffic secrets go to the kernel after the handshake.
            c.enable_secret_extraction = true;
            Ok(Arc::new(c))
        };
        let client = client_cfg(server_verifier.clone())?;
        let store_client = client_cfg(Arc::new(ChainOnly {
            inner: server_verifier,
            roots,
            algs: p.signature_verification_algorithms,
        }))?;
        let mut server = ServerConfig::builder_with_provider(p.clone())
            .with_protocol_versions(versions)
            .map_err(cfg)?
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(chain, key)
            .map_err(cfg)?;
        // No resumption: every connection proves its certificate afresh.
        // No ticket either: after the handshake no handshake record follows
        // (one would stop a kTLS receiver, which cannot process it).
        server.send_tls13_tickets = 0;
        server.enable_secret_extraction = true;
        Ok(TlsContext {
            mode,
            ktls: KtlsMode::default(),
            client,
            store_client,
            store_name: None,
            server: Arc::new(server),
        })
    }
}

impl TlsContext {
    /// A client and a server connection of this identity with the handshake
    /// done in memory (the client checks the chain only): for measuring the
    /// record layer without sockets.
    pub fn memory_pair(&self) -> Result<(ClientConnection, ServerConnection), TlsError> {
        let handshake = |source| TlsError::Handshake {
            peer: "memory pair".into(),
            source,
        };
        let io = |e: std::io::Error| handshake(rustls::Error::General(e.to_string()));
        let name =
            ServerName::try_from("store.causeway").map_err(|e| TlsError::Label(e.to_string()))?;
        let c = ClientConnection::new(self.store_client.clone(), name).map_err(handshake)?;
        let s = ServerConnection::new(self.server.clone()).map_err(handshake)?;
        let mut ends: [Connection; 2] = [c.into(), s.into()];
        let mut wire = Vec::new();
        while ends.iter().any(|e| e.is_handshaking() || e.wants_write()) {
            let mut moved = false;
            for from in 0..2 {
                wire.clear();
                while ends[from].wants_write() {
                    ends[from].write_tls(&mut wire).map_err(io)?;
                }
                moved |= !wire.is_empty();
                let to = &mut ends[1 - from];
                let mut rd = &wire[..];
                while !rd.is_empty() {
                    to.read_tls(&mut rd).map_err(io)?;
                    to.process_new_packets().map_err(handshake)?;
                }
            }
            if !moved {
                return Err(handshake(rustls::Error::HandshakeNotComplete));
            }
        }
        match ends {
            [Connection::Client(c), Connection::Server(s)] => Ok((c, s)),
            _ => Err(handshake(rustls::Error::HandshakeNotComplete)),
        }
    }
}

/// The name a rank's certificate must carry.
pub fn peer_name(domain: &str, host: &str) -> Result<ServerName<'static>, TlsError> {
    let name = causeway_core::identity::host_name(domain, host)
        .map_err(|e| TlsError::Label(e.to_string()))?;
    ServerName::try_from(name).map_err(|e| TlsError::Label(e.to_string()))
}

/// Whether the end-entity certificate `der` names `domain` and `host`.
pub fn names(der: &CertificateDer<'_>, domain: &str, host: &str) -> Result<bool, TlsError> {
    let name = peer_name(domain, host)?;
    let ee = webpki::EndEntityCert::try_from(der)
        .map_err(|e| TlsError::Label(format!("unparseable peer certificate: {e}")))?;
    Ok(ee.verify_is_valid_for_subject_name(&name).is_ok())
}

/// A server verifier that checks the chain (to a trusted CA, in validity,
/// for server authentication) and the handshake signature, but not the name.
#[derive(Debug)]
struct ChainOnly {
    inner: Arc<WebPkiServerVerifier>,
    roots: Arc<RootCertStore>,
    algs: WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ee = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|e| rustls::Error::General(e.to_string()))?;
        ee.verify_for_usage(
            self.algs.all,
            &self.roots.roots,
            intermediates,
            now,
            webpki::KeyUsage::server_auth(),
            None,
            None,
        )
        .map_err(webpki_error)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

fn webpki_error(e: webpki::Error) -> rustls::Error {
    use rustls::CertificateError as C;
    rustls::Error::InvalidCertificate(match e {
        webpki::Error::CertExpired { .. } => C::Expired,
        webpki::Error::CertNotValidYet { .. } => C::NotValidYet,
        webpki::Error::UnknownIssuer => C::UnknownIssuer,
        webpki::Error::InvalidSignatureForPublicKey => C::BadSignature,
        e => C::Other(rustls::OtherError(Arc::new(e))),
    })
}
