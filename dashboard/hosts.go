package dashboard

import (
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// hostPolicy says which Host headers the dashboard answers to.
type hostPolicy struct {
	on      bool     // check at all
	allowed []string // lower case, without a trailing dot
}

// newHostPolicy checks Host without authentication, or when hosts are
// listed; "*" turns the check off.
func newHostPolicy(allowed []string, auth bool) hostPolicy {
	p := hostPolicy{on: !auth || len(allowed) > 0}
	for _, h := range allowed {
		if h == "*" {
			return hostPolicy{}
		}
		p.allowed = append(p.allowed, normalHost(h))
	}
	return p
}

// allows reports whether hostport, a Host header, names a loopback address
// (or localhost) or an allowed host, with any port.
func (p hostPolicy) allows(hostport string) bool {
	if !p.on {
		return true
	}
	hp := normalHost(hostport)
	host := hp
	if h, _, err := net.SplitHostPort(hp); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if host == "localhost" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return true
	}
	return host != "" && (slices.Contains(p.allowed, host) || slices.Contains(p.allowed, hp))
}

// normalHost lower-cases a host (or host:port) and drops the dot of a fully
// qualified name.
func normalHost(h string) string {
	h = strings.ToLower(strings.TrimSpace(h))
	if host, port, err := net.SplitHostPort(h); err == nil && !strings.Contains(host, ":") {
		return net.JoinHostPort(strings.TrimSuffix(host, "."), port)
	}
	return strings.TrimSuffix(h, ".")
}

// checkHost answers 421 Misdirected Request to a request for a host the
// dashboard does not serve (see Options.AllowedHosts).
func (s *server) checkHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hosts.allows(r.Host) {
			next.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusMisdirectedRequest)
		fmt.Fprintf(w, "421 Misdirected Request: this dashboard does not answer to host %q.\n\n"+
			"Without authentication it answers only to loopback names (localhost, 127.0.0.1, [::1]), so that\n"+
			"no other web site can reach it through a browser (DNS rebinding). To serve this name, add it to\n"+
			"dashboard.Options.AllowedHosts (streamq dashboard --allowed-host %s), or set up authentication.\n",
			r.Host, strings.TrimSpace(r.Host))
	})
}

// checkAllowedHost says what is wrong with an entry of Options.AllowedHosts.
func checkAllowedHost(h string) error {
	switch {
	case h == "*":
		return nil
	case strings.TrimSpace(h) == "":
		return fmt.Errorf("dashboard: AllowedHosts holds an empty name: remove it")
	case strings.Contains(h, "://") || strings.ContainsAny(h, "/?#@ \t\r\n"):
		return fmt.Errorf("dashboard: AllowedHosts entry %q is not a host name: write the name alone, like \"jobs.example.com\" or \"jobs.example.com:8443\"", h)
	}
	return nil
}

// checkOrigin says what is wrong with an entry of Options.TrustedOrigins.
func checkOrigin(origin string) error {
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("dashboard: TrustedOrigins entry %q is not an origin: write scheme and host, like \"https://jobs.example.com\" (with :port if not the default)", origin)
	}
	return nil
}

// normalOrigin is origin in the form an Origin header has: lower case,
// without a trailing slash.
func normalOrigin(origin string) string {
	return strings.ToLower(strings.TrimSuffix(origin, "/"))
}
