package redact

import (
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"},
		{"redis://ops:s3cret@host:6379/2", "redis://ops:xxxxx@host:6379/2"},
		{"redis://:s3cret@host", "redis://:xxxxx@host"},
		{"redis://s3cret@host", "redis://xxxxx@host"},
		{"rediss://ops:pa/ss@host:abc", "rediss://ops:xxxxx@host:abc"},
		{"redis://ops:p@ss@host", "redis://ops:xxxxx@host"},
		{"unix://ops:s3cret@/run/redis.sock", "unix://ops:xxxxx@/run/redis.sock"},
		{"not a url", "not a url"},
	} {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestParseURL checks that no malformed URL's error shows its password,
// and that each says what is wrong.
func TestParseURL(t *testing.T) {
	t.Parallel()
	const pw = "Sup3rS3cret"
	for _, tt := range []struct {
		name, url, want string
	}{
		{"bad port", "redis://ops:" + pw + "@host:abc", "port"},
		{"password with a slash", "redis://ops:" + pw + "/x@host", "percent-encode"},
		{"bad escape", "redis://ops:" + pw + "%zz@host", "percent-encode"},
		{"space", "redis://ops:" + pw + " x@host", "percent-encode"},
		{"bad database", "redis://ops:" + pw + "@host/x", "database"},
		{"database quoting the password", "redis://ops:" + pw + "@host/" + pw, "database"},
		{"bad option", "redis://ops:" + pw + "@host/0?bogus=1", "bogus"},
		{"bad option value", "redis://ops:" + pw + "@host/0?pool_size=" + pw, "pool_size"},
		{"bad scheme", "http://ops:" + pw + "@host", "scheme"},
		{"password only", "redis://" + pw + "@host/" + pw, "database"},
		{"encoded password", "redis://ops:Sup3r%2FS3cret@host/Sup3r%2FS3cret", "path"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseURL(tt.url)
			if err == nil {
				t.Fatalf("ParseURL(%q) = nil error", tt.url)
			}
			msg := err.Error()
			for _, secret := range []string{pw, "Sup3r/S3cret", "Sup3r%2FS3cret"} {
				if strings.Contains(msg, secret) {
					t.Errorf("error %q shows the password", msg)
				}
			}
			if !strings.Contains(msg, tt.want) || !strings.Contains(msg, Mask) {
				t.Errorf("error %q does not say %q, or does not show the URL redacted", msg, tt.want)
			}
		})
	}
	if _, err := ParseURL("redis://ops:a@host/a"); err == nil || strings.Contains(err.Error(), `"a"`) || !strings.Contains(err.Error(), "database number") {
		t.Errorf("a one-letter password quoted back: %v", err)
	}
	if o, err := ParseURL("redis://ops:" + pw + "@host:7000/3"); err != nil || o.Password != pw || o.DB != 3 {
		t.Errorf("a good URL: %+v, %v", o, err)
	}
}
