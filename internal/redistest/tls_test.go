package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// dialOnce returns a client for opt that does not retry, closed in t.Cleanup.
func dialOnce(t *testing.T, opt *redis.Options) *redis.Client {
	t.Helper()
	opt.MaxRetries = -1
	opt.DialTimeout = testTimeout
	return newTestClient(t, opt)
}

func TestStartTLSServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	s := StartTLSServer(t)

	rdb := dialOnce(t, &redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig()})
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET over TLS with the test's CA: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET over TLS = %q, %v; want \"v\"", got, err)
	}

	if !strings.HasPrefix(s.URL(), "rediss://127.0.0.1:") {
		t.Errorf("URL() = %q, want rediss://127.0.0.1:port", s.URL())
	}
	opt, err := redis.ParseURL(s.URL())
	if err != nil {
		t.Fatalf("ParseURL(%q): %v", s.URL(), err)
	}
	opt.TLSConfig = s.TLSConfig()
	if err := dialOnce(t, opt).Ping(ctx).Err(); err != nil {
		t.Errorf("PING with options from URL() and TLSConfig(): %v", err)
	}

	// Without the CA the certificate is not trusted.
	noCA := dialOnce(t, &redis.Options{Addr: s.Addr(), TLSConfig: &tls.Config{ServerName: TLSServerName, MinVersion: tls.VersionTLS12}})
	err = noCA.Ping(ctx).Err()
	var unknown x509.UnknownAuthorityError
	if !errors.As(err, &unknown) {
		t.Errorf("PING over TLS without the CA: err = %v, want x509.UnknownAuthorityError", err)
	}
	// A plain client gets no answer it understands.
	if err := dialOnce(t, &redis.Options{Addr: s.Addr()}).Ping(ctx).Err(); err == nil {
		t.Errorf("PING without TLS succeeded, want an error")
	}

	// Restart keeps TLS and the certificates.
	s.Restart()
	if err := dialOnce(t, &redis.Options{Addr: s.Addr(), TLSConfig: s.TLSConfig()}).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING over TLS after Restart: %v", err)
	}
}

func TestServer_TLSConfigPlain(t *testing.T) {
	t.Parallel()
	s := StartServer(t)
	if c := s.TLSConfig(); c != nil {
		t.Errorf("TLSConfig() of a plain server = %v, want nil", c)
	}
	if !strings.HasPrefix(s.URL(), "redis://127.0.0.1:") {
		t.Errorf("URL() = %q, want redis://127.0.0.1:port", s.URL())
	}
}
