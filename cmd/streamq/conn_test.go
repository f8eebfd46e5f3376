package main

import (
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/pflag"
)

// TestConnFlags_NewClient checks which client and address each way of
// naming Redis gives, without a server.
func TestConnFlags_NewClient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		where string // prefix of the address description
		kind  string // "client", "cluster", "failover"
		user  string
		code  int // exit code of the error, 0 for none
	}{
		{name: "default", where: "127.0.0.1:6379 (from the default)", kind: "client"},
		{name: "REDIS_ADDR", env: map[string]string{"REDIS_ADDR": "10.1.1.1:7000"}, where: "10.1.1.1:7000 (from REDIS_ADDR)", kind: "client"},
		{name: "REDIS_URL wins over REDIS_ADDR", env: map[string]string{"REDIS_URL": "redis://10.2.2.2:7001/3", "REDIS_ADDR": "10.1.1.1:7000"}, where: "10.2.2.2:7001 (from REDIS_URL)", kind: "client"},
		{name: "flag wins over env", args: []string{"--url", "rediss://u:p@10.3.3.3:7002"}, env: map[string]string{"REDIS_URL": "redis://10.2.2.2:7001"}, where: "10.3.3.3:7002 (from --url)", kind: "client", user: "u"},
		{name: "unix", args: []string{"--url", "unix:///run/redis.sock"}, where: "/run/redis.sock (from --url)", kind: "client"},
		{name: "user from env", env: map[string]string{"STREAMQ_REDIS_USER": "ops", "STREAMQ_REDIS_PASSWORD": "pw"}, where: "127.0.0.1:6379", kind: "client", user: "ops"},
		{name: "cluster", args: []string{"--cluster", "10.0.0.1:7000,10.0.0.2:7000"}, where: "cluster 10.0.0.1:7000,10.0.0.2:7000", kind: "cluster"},
		{name: "sentinel", args: []string{"--sentinel", "mymaster@10.0.0.1:26379,10.0.0.2:26379"}, where: "master mymaster of sentinels", kind: "failover"},
		{name: "sentinel without master", args: []string{"--sentinel", "10.0.0.1:26379"}, code: exitUsage},
		{name: "two targets", args: []string{"--url", "redis://a:1", "--cluster", "b:2"}, code: exitUsage},
		{name: "bad scheme", args: []string{"--url", "http://x"}, code: exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var c connFlags
			fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
			c.register(fs, func(k string) string { return tc.env[k] })
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			client, where, err := c.newClient()
			if tc.code != 0 {
				var e *exitError
				if !errors.As(err, &e) || e.code != tc.code {
					t.Fatalf("err = %v, want exit code %d", err, tc.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			if !strings.HasPrefix(where, tc.where) {
				t.Errorf("where = %q, want prefix %q", where, tc.where)
			}
			kind, user := "", ""
			switch x := client.(type) {
			case *redis.ClusterClient:
				kind, user = "cluster", x.Options().Username
			case *redis.Client:
				kind, user = "client", x.Options().Username
				if x.Options().Addr == "FailoverClient" {
					kind = "failover"
				}
			}
			if kind != tc.kind {
				t.Errorf("client %T (%s), want %s", client, kind, tc.kind)
			}
			if user != tc.user {
				t.Errorf("user = %q, want %q", user, tc.user)
			}
		})
	}
}
