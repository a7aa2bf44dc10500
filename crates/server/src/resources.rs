//! What the server loads once, when it starts, from the files its [`Config`] names: the HTTP
//! response body (`--body`: in memory, or a file held open for sendfile) and the TLS
//! configuration (`--tls-cert`, `--tls-key`). The Config stays plain data; these are the live
//! things, read and checked before anything listens, and held once (`Arc<Resources>`) by the
//! server's shared state for every thread to borrow.

use std::sync::Arc;
use std::time::SystemTime;

use sockscale_proto::http::{HttpConfig, ResponseBody};
use sockscale_proto::Protocol;
use sockscale_tls::{ServerTls, TlsConfigError};

use sockscale_proto::quic::QuicConfigError;

use crate::body::{BodyError, BodyFile};
use crate::config::{Config, Service};
use crate::http3::Http3Service;

/// The server's loaded files (see the module).
#[derive(Debug, Default)]
pub struct Resources {
    /// The open body file an HTTP response body in a file (`ResponseBody::File`) is sent from.
    pub body: Option<Arc<BodyFile>>,
    /// The TLS configuration every connection's session is made from (its certificate, session
    /// cache and handshake count, shared by every session).
    pub tls: Option<ServerTls>,
    /// The HTTP response body `--body` gave, replacing the service's (in memory, or in `body`).
    response: Option<ResponseBody>,
    /// `--http3`: what every UDP socket's QUIC endpoint is made from.
    pub http3: Option<Http3Service>,
}

/// Why a file the configuration names could not be loaded: one line, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Body(#[from] BodyError),
    #[error(transparent)]
    Tls(#[from] TlsConfigError),
    #[error("--http3: {0}")]
    Quic(#[from] QuicConfigError),
}

impl Resources {
    /// Read what `cfg` names: the body file of an HTTP service, the certificate and key.
    pub fn load(cfg: &Config) -> Result<Resources, LoadError> {
        let (response, body) = match (&cfg.body, &cfg.service) {
            (Some(src), Service::Http(_)) => {
                let (response, file) = BodyFile::load(&src.path, src.sendfile, src.sendfile_min, src.processes)?;
                (Some(response), file)
            }
            _ => (None, None),
        };
        let tls = match &cfg.tls {
            Some(files) => Some(ServerTls::from_pem_files(&files.cert, &files.key, SystemTime::now(), &files.options)?),
            None => None,
        };
        let mut resources = Resources { body, tls, response, http3: None };
        if let (Some(tls), Protocol::Http(http)) = (&resources.tls, resources.protocol(&cfg.service)) {
            resources.http3 = Http3Service::new(cfg, tls, http)?;
        }
        Ok(resources)
    }

    /// The protocol `service` is served with: HTTP's body is the one loaded, and HTTP/2 reads
    /// a body in a file from the open file.
    pub fn protocol(&self, service: &Service) -> Protocol {
        match service {
            Service::Http(http) => {
                let http = match &self.response {
                    Some(body) => Arc::new(HttpConfig { body: body.clone(), ..HttpConfig::clone(http) }),
                    None => http.clone(),
                };
                Protocol::Http(BodyFile::serve_http(&http, self.body.as_ref()))
            }
            Service::Echo | Service::UdpEcho => Protocol::Echo,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use bytes::Bytes;

    use super::*;
    use crate::body::SendfileMode;
    use crate::config::{BodySource, TlsFiles};

    /// A file of `len` bytes in the temporary directory, removed when dropped.
    struct TempFile(PathBuf);

    impl TempFile {
        fn new(name: &str, len: usize) -> TempFile {
            let path = std::env::temp_dir().join(format!("sockscale-resources-{name}-{}", std::process::id()));
            std::fs::write(&path, vec![b'x'; len]).expect("write");
            TempFile(path)
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn http_with_body(path: &Path, sendfile: SendfileMode) -> Config {
        let body = BodySource { path: path.to_owned(), sendfile, sendfile_min: 0, processes: 1 };
        Config { service: Service::Http(Arc::new(HttpConfig::default())), body: Some(body), ..Config::default() }
    }

    fn http_body(protocol: &Protocol) -> ResponseBody {
        let Protocol::Http(http) = protocol else { panic!("http") };
        http.body.clone()
    }

    #[test]
    fn the_body_file_is_loaded_once_and_replaces_the_service_body() {
        let file = TempFile::new("body", 5000);
        let cfg = http_with_body(&file.0, SendfileMode::On);
        let sent = Resources::load(&cfg).expect("load");
        assert_eq!(sent.body.as_ref().map(|f| f.len()), Some(5000));
        assert_eq!(http_body(&sent.protocol(&cfg.service)), ResponseBody::File { len: 5000 });
        let cfg = http_with_body(&file.0, SendfileMode::Off);
        let read = Resources::load(&cfg).expect("load");
        assert!(read.body.is_none(), "a body in memory holds no file open");
        assert_eq!(http_body(&read.protocol(&cfg.service)), ResponseBody::Bytes(Bytes::from(vec![b'x'; 5000])));
        // Echo has no body: the file is not even opened.
        let echo = Config {
            service: Service::Echo,
            body: Some(BodySource { path: "/nonexistent".into(), ..cfg.body.clone().expect("body") }),
            ..cfg
        };
        assert!(Resources::load(&echo).is_ok_and(|r| r.body.is_none() && r.tls.is_none()));
    }

    #[test]
    fn a_file_that_cannot_be_loaded_is_one_line_naming_it() {
        let missing = Resources::load(&http_with_body(Path::new("/nonexistent/page.html"), SendfileMode::Auto));
        let text = missing.expect_err("no such file").to_string();
        assert!(text.contains("--body /nonexistent/page.html") && !text.contains('\n'), "{text}");
        let files = TlsFiles {
            cert: "/nonexistent/c.pem".into(),
            key: "/nonexistent/k.pem".into(),
            options: Default::default(),
        };
        let text = Resources::load(&Config { tls: Some(files), ..Config::default() }).expect_err("no cert").to_string();
        assert!(text.starts_with("/nonexistent/c.pem: cannot read it") && !text.contains('\n'), "{text}");
    }
}
