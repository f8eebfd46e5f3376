package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/mattn/go-isatty"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"

	"github.com/streamq/streamq"
	"github.com/streamq/streamq/internal/redact"
)

// Environment variables read by streamq (flags win).
const (
	envURL      = "REDIS_URL"  // the documented one
	envAddr     = "REDIS_ADDR" // host:port, what the tests use; read when REDIS_URL is unset
	envUser     = "STREAMQ_REDIS_USER"
	envPassword = "STREAMQ_REDIS_PASSWORD"
	envPrefix   = "STREAMQ_PREFIX"
	envGroup    = "STREAMQ_GROUP"

	defaultURL = "redis://127.0.0.1:6379"

	// dialerRetries: a person waits for the answer, so a refused
	// connection is reported at once, not after go-redis's five dials.
	dialerRetries = 1
)

// connFlags are the connection flags, with their environment twins.
type connFlags struct {
	url      string
	cluster  []string
	sentinel string
	user     string
	password string
	tls      bool
	prefix   string
	group    string

	env func(string) string
}

func (c *connFlags) register(fs *pflag.FlagSet, env func(string) string) {
	c.env = env
	fs.StringVar(&c.url, "url", "", "Redis URL: redis://[user:pass@]host:port[/db], rediss:// (TLS) or unix:///path (env "+envURL+"; default "+defaultURL+")")
	fs.StringSliceVar(&c.cluster, "cluster", nil, "Redis Cluster nodes host:port,... (instead of --url)")
	fs.StringVar(&c.sentinel, "sentinel", "", "Redis Sentinel: master@host:port,... (instead of --url)")
	fs.StringVar(&c.user, "user", "", "Redis ACL user (env "+envUser+")")
	fs.StringVar(&c.password, "password", "", "Redis password (env "+envPassword+"; prefer the environment, flags show in ps)")
	fs.BoolVar(&c.tls, "tls", false, "use TLS with --cluster or --sentinel (--url says it with rediss://)")
	fs.StringVar(&c.prefix, "prefix", "", "key prefix of the queues (env "+envPrefix+"; default "+streamq.DefaultKeyPrefix+")")
	fs.StringVar(&c.group, "group", "", "consumer group of the queues (env "+envGroup+"; default "+streamq.DefaultGroup+")")
}

// resolve fills the values the flags left empty from the environment and
// the defaults, and returns where the address came from.
func (c *connFlags) resolve() (source string) {
	pick := func(v *string, name, def string) {
		if *v == "" {
			*v = c.env(name)
		}
		if *v == "" {
			*v = def
		}
	}
	pick(&c.user, envUser, "")
	pick(&c.password, envPassword, "")
	pick(&c.prefix, envPrefix, streamq.DefaultKeyPrefix)
	pick(&c.group, envGroup, streamq.DefaultGroup)
	switch {
	case len(c.cluster) > 0:
		return "--cluster"
	case c.sentinel != "":
		return "--sentinel"
	case c.url != "":
		return "--url"
	case c.env(envURL) != "":
		c.url = c.env(envURL)
		return envURL
	case c.env(envAddr) != "":
		c.url = "redis://" + c.env(envAddr)
		return envAddr
	default:
		c.url = defaultURL
		return "the default"
	}
}

// newClient builds the client from the resolved flags (without talking to
// Redis) and says where it points.
func (c *connFlags) newClient() (redis.UniversalClient, string, error) {
	set := 0
	for _, b := range []bool{len(c.cluster) > 0, c.sentinel != "", c.url != ""} {
		if b {
			set++
		}
	}
	if set > 1 {
		return nil, "", usageErr(errors.New("use one of --url, --cluster and --sentinel"))
	}
	source := c.resolve()
	var tlsConf *tls.Config
	if c.tls {
		tlsConf = &tls.Config{MinVersion: tls.VersionTLS12}
	}
	switch {
	case len(c.cluster) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.cluster, Username: c.user, Password: c.password, TLSConfig: tlsConf, DialerRetries: dialerRetries}),
			"cluster " + strings.Join(c.cluster, ",") + " (from " + source + ")", nil
	case c.sentinel != "":
		master, addrs, ok := strings.Cut(c.sentinel, "@")
		if !ok || master == "" || addrs == "" {
			return nil, "", usageErr(fmt.Errorf("--sentinel %q: use master@host:port,host:port", c.sentinel))
		}
		return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: master, SentinelAddrs: strings.Split(addrs, ","),
				Username: c.user, Password: c.password, TLSConfig: tlsConf, DialerRetries: dialerRetries}),
			"master " + master + " of sentinels " + addrs + " (from " + source + ")", nil
	}
	o, err := redact.ParseURL(c.url)
	if err != nil {
		return nil, "", usageErr(fmt.Errorf("%s %v: use redis://host:port, rediss://host:port or unix:///path/redis.sock", source, err))
	}
	if tlsConf != nil && o.TLSConfig == nil {
		o.TLSConfig = tlsConf
	}
	o.DialerRetries = dialerRetries
	if c.user != "" {
		o.Username = c.user
	}
	if c.password != "" {
		o.Password = c.password
	}
	return redis.NewClient(o), o.Addr + " (from " + source + ")", nil
}

// connect returns the client, creating it and checking that Redis answers
// on the first call.
func (a *app) connect(ctx context.Context) (redis.UniversalClient, error) {
	if a.client != nil {
		return a.client, nil
	}
	c, where, err := a.conn.newClient()
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, a.timeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, unreachable(where, err)
	}
	a.client = c
	return c, nil
}

// unreachable explains a failed PING with what to do about it.
func unreachable(where string, err error) error {
	hint := `Start one with "redis-server" (Debian: apt-get install redis-server; macOS: brew install redis;
or: docker run -p 6379:6379 redis:7), or point streamq at yours with --url redis://host:port or REDIS_URL.`
	msg := err.Error()
	if strings.Contains(msg, "NOAUTH") || strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "NOPERM") {
		hint = "Pass the credentials with --user/--password, STREAMQ_REDIS_USER/STREAMQ_REDIS_PASSWORD, or in the URL (redis://user:pass@host:port)."
	}
	return &exitError{code: exitFailure, err: fmt.Errorf("cannot reach Redis at %s: %v\n%s", where, err, hint)}
}

// quietLogger drops go-redis's own log lines (connect has the error).
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// isTerminal reports whether f is a terminal.
func isTerminal(f *os.File) bool {
	return isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())
}

// signalContext is cancelled by Ctrl-C or SIGTERM.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}
