package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamq/streamq/dashboard"
)

// Environment variables of the dashboard's built-in authentication.
const (
	envDashboardUser     = "STREAMQ_DASHBOARD_USER"
	envDashboardPassword = "STREAMQ_DASHBOARD_PASSWORD"
	envDashboardToken    = "STREAMQ_DASHBOARD_TOKEN"
)

func newDashboardCmd(a *app) *cobra.Command {
	var (
		listen          string
		readOnly, hide  bool
		basePath        string
		hosts, origins  []string
		tlsCert, tlsKey string
		sessionTTL      time.Duration
		secureCookies   bool
		ob              outboxFlags
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve the web dashboard (loopback only by default)",
		Long: `Serve the web dashboard of the queues: counts and charts, jobs by state with
search, one job in full, dead letters with filters and bulk requeue and purge,
consumers, schedules, priority bands, write-behind status, each queue's history
(2 hours per minute, 7 days per hour) and the Redis server, and the actions
(pause, resume, cancel, delete, run now, requeue, purge, the same for every job
of a state, deleting a queue) unless --read-only.

Authentication comes from the environment, never from flags (they show in ps):
  STREAMQ_DASHBOARD_USER and STREAMQ_DASHBOARD_PASSWORD   basic authentication (a password
                                                           of 15+ characters)
  STREAMQ_DASHBOARD_TOKEN                                  bearer token (16+ characters);
                                                           browsers sign in once on a form
                                                           for --session-ttl, and sign out
Without them the dashboard only listens on a loopback address, and answers only
to loopback host names (localhost, 127.0.0.1, [::1]) and --allowed-host ones.
Failed sign-ins are throttled per client and logged on stderr, with an audit line
for every action (who, what, which queue and job, how many).

Beyond loopback, serve TLS with --tls-cert and --tls-key (cookies are then
Secure), or put it behind a TLS proxy (--secure-cookies; --trusted-origin for
the public origin when the proxy rewrites Host).

With --outbox-postgres or --outbox-sqlite (and --outbox-table), the Outbox page
and a panel of the overview show that outbox table's backlog.`,
		Example: `  streamq dashboard
  streamq dashboard --listen 127.0.0.1:9090 --read-only --hide-payloads
  STREAMQ_DASHBOARD_TOKEN=$(openssl rand -hex 24) streamq dashboard --listen :8443 \
      --tls-cert /etc/streamq/tls.crt --tls-key /etc/streamq/tls.key --allowed-host jobs.example.com`,
		Args: exactArgs(0, ""),
		RunE: func(cmd *cobra.Command, _ []string) error {
			var auth *dashboard.Auth
			user, password, token := a.env(envDashboardUser), a.env(envDashboardPassword), a.env(envDashboardToken)
			if user != "" || password != "" || token != "" {
				auth = &dashboard.Auth{Username: user, Password: password, Token: token}
			}
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usagef("--listen %q: %v (want host:port, like 127.0.0.1:8080)", listen, err)
			}
			if ip := net.ParseIP(host); auth == nil && host != "localhost" && (ip == nil || !ip.IsLoopback()) {
				return usagef("--listen %s is not a loopback address: set %s (or %s and %s) so that the dashboard asks for credentials", listen, envDashboardToken, envDashboardUser, envDashboardPassword)
			}
			if (tlsCert == "") != (tlsKey == "") {
				return usagef("--tls-cert and --tls-key go together: the certificate (PEM, with its chain) and its private key")
			}
			var tlsConf *tls.Config
			if tlsCert != "" {
				pair, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usagef("--tls-cert %s, --tls-key %s: %v", tlsCert, tlsKey, err)
				}
				tlsConf = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
			}
			var outboxes []dashboard.Outbox
			if ob.postgres != "" || ob.sqlite != "" {
				db, store, err := ob.open()
				if err != nil {
					return err
				}
				defer db.Close()
				outboxes = []dashboard.Outbox{{Name: ob.name(), Store: store}}
			}
			client, err := a.connect(cmd.Context())
			if err != nil {
				return err
			}
			h, err := dashboard.New(client, &dashboard.Options{
				Outboxes:       outboxes,
				Prefix:         a.conn.prefix, // resolved by connect (flag, env, default)
				Group:          a.conn.group,
				BasePath:       basePath,
				ReadOnly:       readOnly,
				HidePayloads:   hide,
				Auth:           auth,
				AllowedHosts:   hosts,
				TrustedOrigins: origins,
				SecureCookies:  secureCookies,
				SessionTTL:     sessionTTL,
				Logger:         slog.New(slog.NewTextHandler(a.stderr, nil)),
			})
			if err != nil {
				return usageErr(err)
			}
			mux := http.NewServeMux()
			mux.Handle(basePath+"/", h)
			if basePath != "" {
				mux.Handle("/{$}", http.RedirectHandler(basePath+"/", http.StatusFound))
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen on %s: %w", listen, err)
			}
			srv := &http.Server{
				Handler:           mux,
				ReadHeaderTimeout: 10 * time.Second,
				ReadTimeout:       30 * time.Second,
				WriteTimeout:      3 * time.Minute, // a bulk requeue or purge of many dead letters
				IdleTimeout:       2 * time.Minute,
				TLSConfig:         tlsConf,
			}
			scheme := "http"
			if tlsConf != nil {
				scheme = "https"
			}
			fmt.Fprintf(a.stderr, "streamq dashboard on %s://%s%s/ (prefix %s%s%s)\n", scheme, ln.Addr(), basePath, a.conn.prefix,
				map[bool]string{true: ", read-only", false: ""}[readOnly], map[bool]string{true: ", payloads hidden", false: ""}[hide])
			errc := make(chan error, 1)
			go func() {
				if tlsConf != nil {
					errc <- srv.ServeTLS(ln, "", "")
					return
				}
				errc <- srv.Serve(ln)
			}()
			select {
			case err := <-errc:
				return err
			case <-cmd.Context().Done():
			}
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				return fmt.Errorf("dashboard shutdown: %w", err)
			}
			if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "address to serve on (host:port); beyond loopback only with authentication")
	f.BoolVar(&readOnly, "read-only", false, "hide and refuse every action (pause, cancel, delete, requeue, purge, ...)")
	f.StringVar(&basePath, "base-path", "", `serve under this path, like "/streamq" (for a reverse proxy)`)
	f.BoolVar(&hide, "hide-payloads", false, "hide payloads, results, headers and errors, and the searches by them")
	f.StringArrayVar(&hosts, "allowed-host", nil, `also answer to this host name (repeatable; "*" for any, only with authentication you trust)`)
	f.StringArrayVar(&origins, "trusted-origin", nil, "accept actions from pages of this origin, like https://jobs.example.com (repeatable; for a proxy that rewrites Host)")
	f.StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this certificate (PEM file, with its chain); needs --tls-key")
	f.StringVar(&tlsKey, "tls-key", "", "the private key of --tls-cert (PEM file)")
	f.BoolVar(&secureCookies, "secure-cookies", false, "mark cookies Secure on plain HTTP too (a proxy in front terminates TLS)")
	ob.registerAs(cmd, "outbox-")
	f.DurationVar(&sessionTTL, "session-ttl", dashboard.DefaultSessionTTL, "how long a browser stays signed in with the token")
	return cmd
}
