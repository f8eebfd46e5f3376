// Package dashboard is a web dashboard for streamq queues: an http.Handler to
// mount in your own server, or to run alone with `streamq dashboard`.
//
// It shows every queue registered under a key prefix (waiting, running,
// delayed, retrying, dead and cancelled jobs, the age of the oldest
// waiting job, processed and failed jobs per minute as server-rendered SVG
// charts, a paused badge), the jobs of a queue by state with paging and a
// search by ID, header and payload substring, one job (payload as indented
// JSON or escaped bytes, headers, each failed attempt with its error,
// progress, result, timings, trace ID), dead letters with filters by reason,
// error and time and bulk requeue and purge behind a confirmation that shows
// the count, consumers and workers, periodic schedules, priority bands and
// write-behind status. Actions (pause, resume, cancel, delete, run now,
// requeue, purge) are hidden and refused with Options.ReadOnly.
//
// Everything it reads and does goes through package inspect, whose queries
// are bounded, so every page answers quickly however long the queues are.
//
// # Security
//
//   - Authentication: Options.Auth (basic, with a password of at least
//     MinPasswordLen characters, or a bearer token; a browser signs in on a
//     form and gets a session of Options.SessionTTL that "Sign out" ends),
//     failed sign-ins throttled per client and logged, and
//     Options.Middleware to plug your own.
//   - Hosts: without Auth, only loopback host names and addresses, and
//     Options.AllowedHosts, are served (421 otherwise), against DNS
//     rebinding.
//   - Every action is a POST that must come from the same origin (Origin or
//     Referer, Sec-Fetch-Site; "Origin: null" is refused;
//     Options.TrustedOrigins for a reverse proxy that rewrites Host) and
//     carry a CSRF token: the HMAC, under a key drawn at New, of a random
//     value kept in a SameSite=Strict HttpOnly cookie. Each action is
//     written to Options.AuditLogger with who, what and how many.
//   - TLS: serve the handler with http.Server.ListenAndServeTLS (or behind a
//     proxy, with Options.SecureCookies); cookies are Secure under TLS.
//   - Headers: a Content-Security-Policy allowing only the dashboard's own
//     script and style sheet (no inline script, no other origin, no framing),
//     X-Content-Type-Options nosniff, X-Frame-Options DENY,
//     Referrer-Policy same-origin (no referrer leaves the dashboard, and
//     forms carry their origin), Cache-Control no-store.
//   - Text from jobs is escaped, and characters that would not show as
//     themselves (right-to-left overrides, zero-width spaces, control
//     characters) are written as escapes like \u202e.
//   - Options.HidePayloads keeps payloads, results, headers and errors off
//     every page and turns off the searches by them.
//
// Templates, the style sheet and the small script (live refresh of each
// page's live part by fetching it again, every Options.Refresh) are embedded
// with go:embed: nothing is loaded from elsewhere and nothing needs a build
// step.
package dashboard
