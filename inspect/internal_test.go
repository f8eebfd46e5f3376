package inspect

import (
	"errors"
	"slices"
	"testing"
)

func TestSimilar(t *testing.T) {
	t.Parallel()
	names := []string{"emails", "email-digest", "orders", "reports", "mail"}
	tests := []struct {
		name string
		want []string
	}{
		{"email", []string{"emails", "mail", "email-digest"}},
		{"ordrs", []string{"orders"}},
		{"zzzzzz", []string{}},
	}
	for _, tt := range tests {
		if got := similar(tt.name, names); !slices.Equal(got, tt.want) {
			t.Errorf("similar(%q) = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	nf := &NotFoundError{What: "job", Name: "1-1"}
	if !errors.Is(nf, ErrJobNotFound) || errors.Is(nf, ErrQueueNotFound) {
		t.Errorf("%v: wrong Is", nf)
	}
	tests := []struct {
		err  StateError
		want string
	}{
		{StateError{ID: "7-0", State: StateRunning, Action: "delete"}, "inspect: job 7-0 is running: cannot delete; cancel it first"},
		{StateError{ID: "7-0", State: StateDone, Action: "cancel"}, "inspect: job 7-0 is done: cannot cancel"},
		{StateError{ID: "7-0", State: StateWaiting, Action: "run now"}, "inspect: job 7-0 is waiting: cannot run now; only delayed and retrying jobs can be run now"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("%q, want %q", got, tt.want)
		}
	}
}

func TestParseState(t *testing.T) {
	t.Parallel()
	for _, s := range states {
		if got, err := ParseState(string(s)); err != nil || got != s {
			t.Errorf("ParseState(%q) = %q, %v", s, got, err)
		}
	}
	if _, err := ParseState("sleeping"); err == nil {
		t.Error("sleeping parsed")
	}
}

func TestParsers(t *testing.T) {
	t.Parallel()
	if got := traceID("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"); got != "4bf92f3577b34da6a3ce929d0e0e4736" {
		t.Errorf("traceID = %q", got)
	}
	if got := traceID("garbage"); got != "" {
		t.Errorf("traceID(garbage) = %q", got)
	}
	lm := "00000000000000000007:-5:1795-0|worker:a:b.c:3"
	if got := leaseOwner(lm); got != "worker:a" {
		t.Errorf("leaseOwner = %q", got)
	}
	if got := memberID(lm); got != "1795-0" {
		t.Errorf("memberID = %q", got)
	}
	if !idLess("9-1", "10-0") || idLess("10-0", "9-9") || !idLess("5-2", "5-10") {
		t.Error("idLess")
	}
	for s, want := range map[string]bool{"1-2": true, "12": true, "d-abc": false, "1-": false, "": false} {
		if streamID(s) != want {
			t.Errorf("streamID(%q) != %v", s, want)
		}
	}
}

func TestParseInfo(t *testing.T) {
	t.Parallel()
	valkey := "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\nredis_mode:standalone\r\nuptime_in_seconds:90\r\n" +
		"# Clients\r\nconnected_clients:3\r\nblocked_clients:1\r\n# Memory\r\nused_memory:1048576\r\nmaxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\n" +
		"# Persistence\r\naof_enabled:1\r\naof_last_write_status:ok\r\nrdb_last_save_time:1700000000\r\n# Stats\r\ninstantaneous_ops_per_sec:42\r\n"
	s := parseInfo(valkey)
	if s.Server != "valkey" || s.Version != "8.0.1" || s.Mode != "standalone" || s.Uptime.Seconds() != 90 || s.Clients != 3 ||
		s.BlockedClients != 1 || s.UsedMemory != 1<<20 || s.OpsPerSec != 42 || !s.AOF || s.RDBLastSave.Unix() != 1700000000 {
		t.Errorf("parseInfo(valkey) = %+v", s)
	}
	if got := s.Product(); got != "Valkey 8.0.1" {
		t.Errorf("Product() of Valkey = %q, want \"Valkey 8.0.1\"", got)
	}
	if w := s.EvictionWarning(); w == "" {
		t.Error("allkeys-lru gives no warning")
	}
	s.RDBSchedule = ""
	if got := s.Persistence(); got != "AOF" {
		t.Errorf("Persistence = %q", got)
	}
	r := parseInfo("redis_version:7.0.15\nmaxmemory_policy:noeviction\n")
	if r.Server != "redis" || r.Version != "7.0.15" || r.EvictionWarning() != "" {
		t.Errorf("parseInfo(redis) = %+v, warning %q", r, r.EvictionWarning())
	}
	if got := r.Persistence(); got != "none (data is lost on restart)" {
		t.Errorf("Persistence = %q", got)
	}
}
