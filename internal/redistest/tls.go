package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TLSServerName is the name the certificate of a [StartTLSServer] server is
// issued to (besides the IP address 127.0.0.1), and the ServerName of
// [Server.TLSConfig].
const TLSServerName = "localhost"

// certValidity is how long the throwaway certificates are valid: long enough
// for any test run, short enough that a leaked one is worthless.
const certValidity = 24 * time.Hour

// StartTLSServer starts a redis-server, as [StartServer] does, that speaks
// only TLS: its port is a TLS port and the plain port is off. The server's
// certificate, for 127.0.0.1 and localhost, is signed by a throwaway CA made
// for this test alone (ECDSA P-256, files in t.TempDir()); clients need not
// present a certificate (--tls-auth-clients no). Connect with
// [Server.TLSConfig], which trusts that CA and no other:
//
//	s := redistest.StartTLSServer(t)
//	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig()})
//
// extraArgs follow the TLS arguments, as in StartServer.
func StartTLSServer(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	files, clientConf, err := writeCertificates(dir)
	if err != nil {
		t.Fatalf("redistest: StartTLSServer: %v", err)
	}
	extra := append([]string{
		"--tls-cert-file", files.cert,
		"--tls-key-file", files.key,
		"--tls-ca-cert-file", files.ca,
		"--tls-auth-clients", "no",
	}, extraArgs...)
	return startServer(t, launch{dir: dir, extra: extra, tls: clientConf})
}

// TLSConfig returns a new client configuration for a server from
// [StartTLSServer]: it trusts the test's CA (and no other) and expects the
// name [TLSServerName]. It returns nil for a server without TLS.
func (s *Server) TLSConfig() *tls.Config {
	if s.l.tls == nil {
		return nil
	}
	return s.l.tls.Clone()
}

// URL returns the server's address as a URL for redis.ParseURL:
// redis://127.0.0.1:port, or rediss://127.0.0.1:port for a TLS server. A URL
// cannot carry the test's CA: after parsing a rediss URL, set the options'
// TLSConfig to [Server.TLSConfig], or the client rejects the certificate.
func (s *Server) URL() string {
	scheme := "redis"
	if s.l.tls != nil {
		scheme = "rediss"
	}
	return scheme + "://" + s.Addr()
}

// TLSCertificate makes a throwaway CA and a server certificate it signs, for
// 127.0.0.1, [::1] and [TLSServerName], as [StartTLSServer] does, for a test
// server of another kind (an HTTPS server). It returns the PEM files of the
// certificate and its key (in t.TempDir()) and a client configuration that
// trusts the CA and no other.
func TLSCertificate(t testing.TB) (certFile, keyFile string, client *tls.Config) {
	t.Helper()
	files, clientConf, err := writeCertificates(t.TempDir())
	if err != nil {
		t.Fatalf("redistest: TLSCertificate: %v", err)
	}
	return files.cert, files.key, clientConf
}

// certFiles are the PEM files written by writeCertificates.
type certFiles struct {
	ca   string // the CA's certificate
	cert string // the server's certificate
	key  string // the server's private key
}

// writeCertificates makes a CA and a server certificate signed by it, writes
// them to dir, and returns the files and a client configuration that trusts
// the CA.
func writeCertificates(dir string) (certFiles, *tls.Config, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certFiles{}, nil, fmt.Errorf("CA key: %w", err)
	}
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour), // clocks of test machines drift
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return certFiles{}, nil, fmt.Errorf("CA certificate: %w", err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return certFiles{}, nil, fmt.Errorf("CA certificate: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certFiles{}, nil, fmt.Errorf("server key: %w", err)
	}
	template := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: TLSServerName},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(certValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{TLSServerName},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, caCert, &key.PublicKey, caKey)
	if err != nil {
		return certFiles{}, nil, fmt.Errorf("server certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return certFiles{}, nil, fmt.Errorf("server key: %w", err)
	}

	files := certFiles{
		ca:   filepath.Join(dir, "ca.crt"),
		cert: filepath.Join(dir, "server.crt"),
		key:  filepath.Join(dir, "server.key"),
	}
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{
		{files.ca, "CERTIFICATE", caDER},
		{files.cert, "CERTIFICATE", der},
		{files.key, "PRIVATE KEY", keyDER},
	} {
		data := pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der})
		if err := os.WriteFile(f.path, data, 0o600); err != nil {
			return certFiles{}, nil, err
		}
	}

	roots := x509.NewCertPool()
	roots.AddCert(caCert)
	return files, &tls.Config{
		RootCAs:    roots,
		ServerName: TLSServerName,
		MinVersion: tls.VersionTLS12,
	}, nil
}
