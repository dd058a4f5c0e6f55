//! Certificates and keys for a test API server: a CA, serving and client certificates, and
//! the service-account signing key.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

/// A PEM certificate and its PEM (PKCS#8) private key.
pub struct CertAndKey {
    /// The certificate.
    pub cert: String,
    /// The private key.
    pub key: String,
}

/// A certificate authority that signs the server's and the test identities' certificates.
pub struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
    /// The service-account token signing key (ECDSA P-256, PKCS#8 PEM).
    pub service_account_key: String,
    /// Its public half (PEM).
    pub service_account_public: String,
}

impl Pki {
    /// A fresh CA and service-account key.
    pub fn new() -> anyhow::Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kubewasm-test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
        let sa = KeyPair::generate()?;
        Ok(Self {
            ca,
            service_account_key: sa.serialize_pem(),
            service_account_public: sa.public_key_pem(),
        })
    }

    /// The CA certificate (PEM).
    pub fn ca_cert(&self) -> String {
        self.ca.pem()
    }

    /// A serving certificate for `localhost` and 127.0.0.1.
    pub fn server(&self) -> anyhow::Result<CertAndKey> {
        let mut params = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        self.sign(params)
    }

    /// A client certificate for user `user` in `groups` (Kubernetes reads CN and O).
    pub fn client(&self, user: &str, groups: &[&str]) -> anyhow::Result<CertAndKey> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name.push(DnType::CommonName, user);
        for group in groups {
            params
                .distinguished_name
                .push(DnType::OrganizationName, *group);
        }
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        self.sign(params)
    }

    fn sign(&self, params: CertificateParams) -> anyhow::Result<CertAndKey> {
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.ca)?;
        Ok(CertAndKey {
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }
}
