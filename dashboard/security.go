package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// csrfCookie holds a random value per browser; forms carry its HMAC.
	csrfCookie = "streamq_dashboard_csrf"
	// csrfField is the form field that carries the token.
	csrfField = "csrf"
	// tokenCookie holds the session of a browser that signed in with the
	// bearer token.
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
		// same-origin, not no-referrer: under no-referrer browsers send
		// "Origin: null" with every form, which sameOrigin refuses.
		h.Set("Referrer-Policy", "same-origin")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// authenticate lets a request through when it carries the basic credentials
// or the bearer token of Options.Auth (in the Authorization header), or the
// cookie of a session started on the sign-in form. Otherwise it answers 401:
// with a basic-auth challenge, or with the sign-in form when only a token is
// set. A client that failed too many sign-ins in a row is answered 429
// without its credentials being checked (see [Auth]).
func (s *server) authenticate(next http.Handler) http.Handler {
	a := s.opts.Auth
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The script and style sheet are public (the sign-in form uses them).
		if s.isPath(r, "/static/", true) {
			next.ServeHTTP(w, r)
			return
		}
		if _, ok := s.session(r); ok {
			next.ServeHTTP(w, withWho(r, tokenUser))
			return
		}
		login := a.Token != "" && r.Method == http.MethodPost && s.isPath(r, "/login", false)
		if login {
			r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
		}
		user, method, tried := s.credentials(r, login)
		if tried {
			client := clientAddr(r)
			if wait := s.throttle.admit(client, s.now()); wait > 0 {
				s.tooMany(w, wait)
				return
			}
			if s.authorized(r, login) {
				s.throttle.succeed(client)
				if login {
					s.startSession(w, r)
					return
				}
				next.ServeHTTP(w, withWho(r, user))
				return
			}
			n, lock := s.throttle.fail(client, s.now())
			s.log.WarnContext(r.Context(), "dashboard: failed sign-in", "client", r.RemoteAddr, "user", user, "method", method,
				"failures", n, "refused_for", lock.String())
			if lock > 0 {
				s.tooMany(w, lock)
				return
			}
			if login {
				s.render(w, r, http.StatusUnauthorized, "login", &view{Title: "Sign in", Error: "wrong token"})
				return
			}
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

// tooMany answers 429 to a client refused for wait after failed sign-ins.
func (s *server) tooMany(w http.ResponseWriter, wait time.Duration) {
	secs := int(math.Ceil(wait.Seconds()))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	http.Error(w, fmt.Sprintf("too many failed sign-ins from your address: try again in %d s", secs), http.StatusTooManyRequests)
}

// credentials returns the user name and method of the credentials r
// presents (the Authorization header, or the token posted to the sign-in
// form when login), and whether it presents any.
func (s *server) credentials(r *http.Request, login bool) (user, method string, tried bool) {
	if login {
		return tokenUser, "form", true
	}
	if u, _, ok := r.BasicAuth(); ok {
		return u, "basic", true
	}
	if _, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return tokenUser, "bearer", true
	}
	return "", "", false
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

// authorized reports whether r carries valid credentials: the token posted
// to the sign-in form when login, else those of its Authorization header.
func (s *server) authorized(r *http.Request, login bool) bool {
	a := s.opts.Auth
	if login {
		return equalSecret(r.PostFormValue("token"), a.Token)
	}
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
	}
	return false
}

// equalSecret compares two secrets in constant time.
func equalSecret(got, want string) bool {
	return subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// startSession answers a good token posted to the sign-in form: it starts a
// session of Options.SessionTTL, keeps its random ID in an HttpOnly cookie
// (never the token itself) and goes to the overview. The form is checked
// for the same origin like every action.
func (s *server) startSession(w http.ResponseWriter, r *http.Request) {
	if !s.sameOrigin(r) {
		http.Error(w, "forbidden: cross-origin request", http.StatusForbidden)
		return
	}
	now := s.now()
	id := s.sessions.start(now, now.Add(s.opts.SessionTTL))
	http.SetCookie(w, &http.Cookie{
		Name: tokenCookie, Value: id, Path: s.cookiePath(), MaxAge: int(s.opts.SessionTTL.Seconds()),
		HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode,
	})
	s.logAction(withWho(r, tokenUser), auditEntry{action: "sign-in", count: -1}, nil)
	http.Redirect(w, r, s.opts.BasePath+"/", http.StatusSeeOther)
}

// session returns the ID of r's valid session, if it has one.
func (s *server) session(r *http.Request) (string, bool) {
	if s.opts.Auth == nil || s.opts.Auth.Token == "" {
		return "", false
	}
	c, err := r.Cookie(tokenCookie)
	if err != nil || !s.sessions.valid(c.Value, s.now()) {
		return "", false
	}
	return c.Value, true
}

// logout ends the session of the browser (a POST with the CSRF token, like
// an action, allowed in read-only mode too) and goes to the sign-in form.
func (s *server) logout(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if why := s.checkCSRF(r); why != "" {
		s.render(w, r, http.StatusForbidden, "error", &view{Title: "Forbidden", Error: "refused: " + why})
		return
	}
	if id, ok := s.session(r); ok {
		s.sessions.end(id)
	}
	http.SetCookie(w, &http.Cookie{Name: tokenCookie, Path: s.cookiePath(), MaxAge: -1, HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode})
	s.logAction(r, auditEntry{action: "sign-out", count: -1}, nil)
	http.Redirect(w, r, s.opts.BasePath+"/", http.StatusSeeOther)
}

// secure reports whether the cookies of r's answer are Secure: under TLS,
// or always with Options.SecureCookies.
func (s *server) secure(r *http.Request) bool { return r.TLS != nil || s.opts.SecureCookies }

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
			HttpOnly: true, Secure: s.secure(r), SameSite: http.SameSiteStrictMode,
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
	if !s.sameOrigin(r) {
		return "cross-origin request (behind a reverse proxy that rewrites Host, list the public origin in Options.TrustedOrigins, streamq dashboard --trusted-origin)"
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
// (or, without one, its Referer) must name the request's host or a trusted
// origin, and Sec-Fetch-Site must not say cross-site. "Origin: null" (a
// sandboxed frame, a data: URL, a redirect from elsewhere) is refused.
func (s *server) sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	src := r.Header.Get("Origin")
	if src == "null" {
		return false
	}
	if src == "" {
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
	return strings.EqualFold(u.Host, r.Host) || slices.Contains(s.trusted, normalOrigin(u.Scheme+"://"+u.Host))
}
