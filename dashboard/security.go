package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"net/url"
	"strings"
)

const (
	// csrfCookie holds a random value per browser; forms carry its HMAC.
	csrfCookie = "streamq_dashboard_csrf"
	// csrfField is the form field that carries the token.
	csrfField = "csrf"
	// tokenCookie marks a browser that signed in with the bearer token.
	tokenCookie = "streamq_dashboard_token"
	// flashCookie carries the message of an action to the page it redirects to.
	flashCookie = "streamq_dashboard_flash"
)

// contentSecurityPolicy allows only the dashboard's own script and style
// files: no inline script or style, no other origin, no framing.
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// securityHeaders sets the response headers every answer carries.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// authenticate lets a request through when it carries the basic credentials
// or the bearer token of Options.Auth (in the Authorization header or, for a
// browser that signed in, the token cookie). Otherwise it answers 401: with a
// basic-auth challenge, or with the sign-in form when only a token is set.
func (s *server) authenticate(next http.Handler) http.Handler {
	a := s.opts.Auth
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The script and style sheet are public (the sign-in form uses them).
		if s.isPath(r, "/static/", true) || s.authorized(r) {
			next.ServeHTTP(w, r)
			return
		}
		if a.Token != "" && r.Method == http.MethodPost && s.isPath(r, "/login", false) {
			s.login(w, r)
			return
		}
		if a.Username != "" {
			w.Header().Set("WWW-Authenticate", `Basic realm="streamq dashboard", charset="UTF-8"`)
		} else {
			w.Header().Set("WWW-Authenticate", `Bearer realm="streamq dashboard"`)
		}
		if a.Token != "" && r.Method == http.MethodGet {
			s.render(w, r, http.StatusUnauthorized, "login", &view{Title: "Sign in"})
			return
		}
		http.Error(w, "unauthorized", http.StatusUnauthorized)
	})
}

// isPath reports whether r is for path p of the dashboard (or, with prefix,
// under it), with or without BasePath (behind http.StripPrefix).
func (s *server) isPath(r *http.Request, p string, prefix bool) bool {
	for _, full := range []string{s.opts.BasePath + p, p} {
		if r.URL.Path == full || (prefix && strings.HasPrefix(r.URL.Path, full)) {
			return true
		}
	}
	return false
}

// authorized reports whether r carries valid credentials.
func (s *server) authorized(r *http.Request) bool {
	a := s.opts.Auth
	if a.Username != "" {
		if u, p, ok := r.BasicAuth(); ok {
			// Compare both in full, whatever the first comparison says.
			uok := subtle.ConstantTimeCompare([]byte(u), []byte(a.Username))
			pok := subtle.ConstantTimeCompare([]byte(p), []byte(a.Password))
			if uok&pok == 1 {
				return true
			}
		}
	}
	if a.Token != "" {
		if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equalSecret(t, a.Token) {
			return true
		}
		if c, err := r.Cookie(tokenCookie); err == nil && equalSecret(c.Value, s.session()) {
			return true
		}
	}
	return false
}

// equalSecret compares two secrets in constant time.
func equalSecret(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// login checks the token posted by the sign-in form and keeps it in an
// HttpOnly cookie. The form is checked for the same origin like every action.
func (s *server) login(w http.ResponseWriter, r *http.Request) {
	if !sameOrigin(r) {
		http.Error(w, "forbidden: cross-origin request", http.StatusForbidden)
		return
	}
	if !equalSecret(r.PostFormValue("token"), s.opts.Auth.Token) {
		s.render(w, r, http.StatusUnauthorized, "login", &view{Title: "Sign in", Error: "wrong token"})
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: tokenCookie, Value: s.session(), Path: s.cookiePath(),
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, s.opts.BasePath+"/", http.StatusSeeOther)
}

// session is the value of the sign-in cookie: derived from the token under
// the key drawn at New, so the cookie never holds the token itself and a
// restart signs browsers out.
func (s *server) session() string { return s.sign("session\x00" + s.opts.Auth.Token) }

// cookiePath is the path of the dashboard's cookies.
func (s *server) cookiePath() string { return s.opts.BasePath + "/" }

// csrfToken returns the token forms of this response carry, setting the
// browser's random CSRF cookie first if it has none.
func (s *server) csrfToken(w http.ResponseWriter, r *http.Request) string {
	v := ""
	if c, err := r.Cookie(csrfCookie); err == nil && len(c.Value) == 64 {
		v = c.Value
	} else {
		b := make([]byte, 32)
		_, _ = rand.Read(b) // never fails (crypto/rand panics instead)
		v = hex.EncodeToString(b)
		http.SetCookie(w, &http.Cookie{
			Name: csrfCookie, Value: v, Path: s.cookiePath(),
			HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
		})
	}
	return s.sign(v)
}

// sign returns the HMAC of a CSRF cookie value under the dashboard's key.
func (s *server) sign(v string) string {
	m := hmac.New(sha256.New, s.csrfKey)
	m.Write([]byte(v))
	return hex.EncodeToString(m.Sum(nil))
}

// checkCSRF reports why an action request must be refused ("" if it may go
// on): it must come from the same origin and carry the token of its cookie.
func (s *server) checkCSRF(r *http.Request) string {
	if !sameOrigin(r) {
		return "cross-origin request"
	}
	c, err := r.Cookie(csrfCookie)
	if err != nil || c.Value == "" {
		return "missing CSRF cookie: reload the page and try again"
	}
	got := r.PostFormValue(csrfField)
	if got == "" || !hmac.Equal([]byte(got), []byte(s.sign(c.Value))) {
		return "invalid CSRF token: reload the page and try again"
	}
	return ""
}

// sameOrigin reports whether r comes from a page of the same host: its Origin
// (or, without one, its Referer) must name the request's host, and
// Sec-Fetch-Site must not say cross-site.
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	src := r.Header.Get("Origin")
	if src == "" || src == "null" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		// Neither header: not a browser (browsers send Origin on every POST);
		// the token still has to match.
		return true
	}
	u, err := url.Parse(src)
	if err != nil || u.Host == "" {
		return false
	}
	return strings.EqualFold(u.Host, r.Host)
}
