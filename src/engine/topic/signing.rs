//! Message signatures, as SNS signs notifications: an RSA key and a self-signed certificate
//! made on first use; SignatureVersion 1 is SHA1withRSA, 2 is SHA256withRSA, over the
//! string-to-sign of the message's fields. The certificate is served at `SigningCertURL`, so
//! subscribers verify with the usual code pointed at this server.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPrivateKey, EncodeRsaPublicKey};
use rsa::pkcs1v15::SigningKey;
use rsa::signature::{SignatureEncoding, Signer};
use rsa::RsaPrivateKey;
use sha2::Digest;

use crate::engine::message::hex;

/// AWS's SNS signing keys are 2048-bit RSA.
const KEY_BITS: usize = 2048;

pub struct MessageSigner {
    sha1: SigningKey<sha1::Sha1>,
    sha256: SigningKey<sha2::Sha256>,
    /// DER of the RSA public key (PKCS#1), as the certificate embeds it.
    public_key_der: Vec<u8>,
    pub certificate_pem: String,
    /// `SimpleNotificationService-<32 hex>.pem`, derived from the certificate.
    pub certificate_file: String,
}

/// rcgen signs the certificate through this, so RSA stays in one crate.
struct CertificateKey<'a>(&'a MessageSigner);

impl rcgen::PublicKeyData for CertificateKey<'_> {
    fn der_bytes(&self) -> &[u8] {
        &self.0.public_key_der
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        &rcgen::PKCS_RSA_SHA256
    }
}

impl rcgen::SigningKey for CertificateKey<'_> {
    fn sign(&self, msg: &[u8]) -> Result<Vec<u8>, rcgen::Error> {
        Ok(self.0.sha256.sign(msg).to_vec())
    }
}

impl MessageSigner {
    /// Generates a key and a self-signed certificate. Errors are described, not panicked on.
    pub fn generate() -> Result<MessageSigner, String> {
        let key = RsaPrivateKey::new(&mut rsa::rand_core::OsRng, KEY_BITS)
            .map_err(|e| format!("RSA key: {e}"))?;
        let mut signer = MessageSigner::from_key(key, String::new(), String::new())?;
        let mut params = rcgen::CertificateParams::new(vec!["sns.orderly.local".to_string()])
            .map_err(|e| e.to_string())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Orderly SNS message signing");
        // Positive 128-bit serial: a random v4 UUID with the top bit cleared.
        let mut serial = *uuid::Uuid::new_v4().as_bytes();
        serial[0] &= 0x7f;
        params.serial_number = Some(rcgen::SerialNumber::from_slice(&serial));
        let certificate = params
            .self_signed(&CertificateKey(&signer))
            .map_err(|e| format!("certificate: {e}"))?;
        let digest = sha2::Sha256::digest(certificate.der());
        signer.certificate_file = format!("SimpleNotificationService-{}.pem", hex(&digest[..16]));
        signer.certificate_pem = certificate.pem();
        Ok(signer)
    }

    /// The private key as PKCS#1 DER, for the data directory.
    pub fn private_key_der(&self) -> Result<Vec<u8>, String> {
        let key: &RsaPrivateKey = self.sha256.as_ref();
        key.to_pkcs1_der()
            .map(|der| der.as_bytes().to_vec())
            .map_err(|e| format!("private key: {e}"))
    }

    /// A signer from a stored key and the certificate made for it.
    pub fn from_parts(
        private_key_der: &[u8],
        certificate_pem: String,
        certificate_file: String,
    ) -> Result<MessageSigner, String> {
        let key =
            RsaPrivateKey::from_pkcs1_der(private_key_der).map_err(|e| format!("RSA key: {e}"))?;
        MessageSigner::from_key(key, certificate_pem, certificate_file)
    }

    fn from_key(
        key: RsaPrivateKey,
        certificate_pem: String,
        certificate_file: String,
    ) -> Result<MessageSigner, String> {
        let public_key_der = key
            .to_public_key()
            .to_pkcs1_der()
            .map_err(|e| format!("public key: {e}"))?
            .as_bytes()
            .to_vec();
        Ok(MessageSigner {
            sha1: SigningKey::new(key.clone()),
            sha256: SigningKey::new(key),
            public_key_der,
            certificate_pem,
            certificate_file,
        })
    }

    /// Base64 signature of `string_to_sign` for SignatureVersion "1" (SHA1) or "2" (SHA256).
    pub fn sign(&self, version: &str, string_to_sign: &str) -> String {
        let signature = if version == "2" {
            self.sha256.sign(string_to_sign.as_bytes()).to_vec()
        } else {
            self.sha1.sign(string_to_sign.as_bytes()).to_vec()
        };
        STANDARD.encode(signature)
    }
}

/// The string SNS signs for a Notification: fixed keys in this order, each `Key\nValue\n`,
/// Subject only when present.
pub fn notification_string_to_sign(
    message: &str,
    message_id: &str,
    subject: Option<&str>,
    timestamp: &str,
    topic_arn: &str,
) -> String {
    let mut out = String::with_capacity(message.len() + 256);
    let mut field = |k: &str, v: &str| {
        out.push_str(k);
        out.push('\n');
        out.push_str(v);
        out.push('\n');
    };
    field("Message", message);
    field("MessageId", message_id);
    if let Some(s) = subject {
        field("Subject", s);
    }
    field("Timestamp", timestamp);
    field("TopicArn", topic_arn);
    field("Type", "Notification");
    out
}

/// The string SNS signs for SubscriptionConfirmation and UnsubscribeConfirmation messages.
pub fn confirmation_string_to_sign(
    kind: &str,
    message: &str,
    message_id: &str,
    subscribe_url: &str,
    timestamp: &str,
    token: &str,
    topic_arn: &str,
) -> String {
    [
        ("Message", message),
        ("MessageId", message_id),
        ("SubscribeURL", subscribe_url),
        ("Timestamp", timestamp),
        ("Token", token),
        ("TopicArn", topic_arn),
        ("Type", kind),
    ]
    .iter()
    .map(|(k, v)| format!("{k}\n{v}\n"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rsa::pkcs1v15::Signature;
    use rsa::signature::Verifier;

    #[test]
    fn string_to_sign_order() {
        assert_eq!(
            notification_string_to_sign("m", "id", Some("s"), "t", "arn"),
            "Message\nm\nMessageId\nid\nSubject\ns\nTimestamp\nt\nTopicArn\narn\nType\nNotification\n"
        );
        assert!(!notification_string_to_sign("m", "id", None, "t", "arn").contains("Subject"));
        assert_eq!(
            confirmation_string_to_sign("SubscriptionConfirmation", "m", "id", "u", "t", "tok", "arn"),
            "Message\nm\nMessageId\nid\nSubscribeURL\nu\nTimestamp\nt\nToken\ntok\nTopicArn\narn\nType\nSubscriptionConfirmation\n"
        );
    }

    #[test]
    fn signatures_verify_with_the_public_key_and_the_certificate_is_pem() {
        let signer = MessageSigner::generate().unwrap();
        assert!(signer
            .certificate_pem
            .starts_with("-----BEGIN CERTIFICATE-----"));
        assert!(
            signer
                .certificate_file
                .starts_with("SimpleNotificationService-")
                && signer.certificate_file.ends_with(".pem")
        );
        use rsa::signature::Keypair;
        let text = "Message\nhi\n";
        let v1 = STANDARD.decode(signer.sign("1", text)).unwrap();
        let v2 = STANDARD.decode(signer.sign("2", text)).unwrap();
        assert!(signer
            .sha1
            .verifying_key()
            .verify(
                text.as_bytes(),
                &Signature::try_from(v1.as_slice()).unwrap()
            )
            .is_ok());
        assert!(signer
            .sha256
            .verifying_key()
            .verify(
                text.as_bytes(),
                &Signature::try_from(v2.as_slice()).unwrap()
            )
            .is_ok());
        assert!(signer
            .sha256
            .verifying_key()
            .verify(b"other", &Signature::try_from(v2.as_slice()).unwrap())
            .is_err());
    }
}
