//! Throwaway TLS material for tests against servers with TLS: one private CA per
//! [`TlsMaterial`], a server certificate for `127.0.0.1` and `localhost`, and a client
//! certificate, written as PEM files into a temp folder that goes when it is dropped.
//!
//! Made in process with rcgen rather than the `openssl` CLI, so a test needs no extra binary
//! and no shell. Two materials never trust each other: a test that hands one's CA to a client
//! of a server started with the other's gets a certificate error, which is how the
//! wrong-CA paths are tested.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};

/// A private CA with a server and a client certificate, as PEM files in a temp folder.
pub struct TlsMaterial {
    dir: tempfile::TempDir,
}

impl Default for TlsMaterial {
    fn default() -> Self {
        Self::new()
    }
}

impl TlsMaterial {
    /// Makes a new CA and, signed by it, a certificate for the servers (`127.0.0.1` and
    /// `localhost`; for server and client use, since etcd's gateway dials etcd with it) and
    /// one for clients (CN `ax-test-client`).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp folder for TLS material");

        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA parameters");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        // A name of its own: two CAs of one name would make a verifier check the other's
        // signature (BadSignature) instead of finding no issuer, which is what a real wrong
        // CA looks like.
        ca.distinguished_name
            .push(DnType::CommonName, crate::unique_name("ax-test-ca"));
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate().expect("CA key");
        let ca_cert = ca.self_signed(&ca_key).expect("self-signed CA certificate");
        let issuer = Issuer::new(ca, ca_key);

        let leaf = |sans: Vec<String>, cn: &str, usages: Vec<ExtendedKeyUsagePurpose>| {
            let mut params = CertificateParams::new(sans).expect("certificate parameters");
            params.distinguished_name.push(DnType::CommonName, cn);
            params.key_usages = vec![
                KeyUsagePurpose::DigitalSignature,
                KeyUsagePurpose::KeyEncipherment,
            ];
            params.extended_key_usages = usages;
            let key = KeyPair::generate().expect("leaf key");
            let cert = params.signed_by(&key, &issuer).expect("signed certificate");
            (cert.pem(), key.serialize_pem())
        };
        let (server_cert, server_key) = leaf(
            vec!["127.0.0.1".into(), "localhost".into()],
            "ax-test-server",
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ],
        );
        let (client_cert, client_key) = leaf(
            Vec::new(),
            "ax-test-client",
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        );

        for (name, pem) in [
            ("ca.crt", ca_cert.pem()),
            ("server.crt", server_cert),
            ("server.key", server_key),
            ("client.crt", client_cert),
            ("client.key", client_key),
        ] {
            std::fs::write(dir.path().join(name), pem)
                .unwrap_or_else(|e| panic!("write {name}: {e}"));
        }
        TlsMaterial { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The folder holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate (PEM file).
    pub fn ca_file(&self) -> PathBuf {
        self.file("ca.crt")
    }

    /// The server certificate (PEM file).
    pub fn server_cert_file(&self) -> PathBuf {
        self.file("server.crt")
    }

    /// The server's private key (PEM file, PKCS#8).
    pub fn server_key_file(&self) -> PathBuf {
        self.file("server.key")
    }

    /// The client certificate (PEM file).
    pub fn client_cert_file(&self) -> PathBuf {
        self.file("client.crt")
    }

    /// The client's private key (PEM file, PKCS#8).
    pub fn client_key_file(&self) -> PathBuf {
        self.file("client.key")
    }

    /// The CA certificate's PEM bytes.
    pub fn ca_pem(&self) -> Vec<u8> {
        read(&self.ca_file())
    }

    /// The client certificate's PEM bytes.
    pub fn client_cert_pem(&self) -> Vec<u8> {
        read(&self.client_cert_file())
    }

    /// The client key's PEM bytes.
    pub fn client_key_pem(&self) -> Vec<u8> {
        read(&self.client_key_file())
    }

    /// Copies the server's certificate, key and the CA into `dir` (as `ca.crt`, `server.crt`,
    /// `server.key`), for a server that must outlive this material across restarts.
    pub(crate) fn copy_server_files(&self, dir: &Path) {
        for name in ["ca.crt", "server.crt", "server.key"] {
            std::fs::copy(self.file(name), dir.join(name))
                .unwrap_or_else(|e| panic!("copy {name}: {e}"));
        }
    }
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}
