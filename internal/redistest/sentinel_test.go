package redistest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestStartSentinel_Failover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	s := StartSentinel(t, SentinelOptions{MasterName: Name(t)})
	t.Logf("sentinel topology (1 master, 1 replica, 3 sentinels) ready after %v", time.Since(start).Round(time.Millisecond))
	if got := len(s.Addrs()); got != DefaultSentinels {
		t.Fatalf("Addrs() has %d sentinels, want %d", got, DefaultSentinels)
	}
	if got := len(s.Servers()); got != 2 {
		t.Fatalf("Servers() has %d data servers, want 2", got)
	}
	first := s.Servers()[0]
	if m, err := s.Master(ctx); err != nil || m != first {
		t.Fatalf("Master() = %v, %v; want the first server %s", m, err, first.Addr())
	}

	rdb := redis.NewFailoverClient(s.FailoverOptions())
	t.Cleanup(func() { _ = rdb.Close() })
	if err := rdb.Set(ctx, "before", "v", 0).Err(); err != nil {
		t.Fatalf("SET through the sentinels: %v", err)
	}
	if n, err := rdb.Wait(ctx, 1, testTimeout).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want the replica to hold the write", n, err)
	}

	start = time.Now()
	newAddr, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover to %s took %v", newAddr, time.Since(start).Round(time.Millisecond))
	if newAddr == first.Addr() || newAddr != s.Servers()[1].Addr() {
		t.Fatalf("Failover() = %s, want the replica %s", newAddr, s.Servers()[1].Addr())
	}
	if got, err := s.MasterAddr(ctx); err != nil || got != newAddr {
		t.Fatalf("MasterAddr() after the failover = %s, %v; want %s", got, err, newAddr)
	}

	// The failover client learns of the switch (a pub/sub message from a
	// sentinel, or a new connection asking for the master): write until a
	// write lands on the new master, bounded.
	direct := newTestClient(t, &redis.Options{Addr: newAddr})
	attempts := 0
	WaitFor(t, TopologyTimeout, "a write through the failover client to reach the new master "+newAddr, func() bool {
		attempts++
		v := strconv.Itoa(attempts)
		if err := rdb.Set(ctx, "after", v, 0).Err(); err != nil {
			return false
		}
		got, err := direct.Get(ctx, "after").Result()
		return err == nil && got == v
	})
	t.Logf("the failover client wrote to the new master after %d attempt(s)", attempts)
	if got, err := rdb.Get(ctx, "before").Result(); err != nil || got != "v" {
		t.Errorf("GET before after the failover = %q, %v; want the replicated \"v\"", got, err)
	}
}

func TestSentinelOptions_withDefaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		in      SentinelOptions
		want    SentinelOptions
		wantErr string
	}{
		{
			name: "zero",
			want: SentinelOptions{MasterName: DefaultMasterName, Replicas: 1, Sentinels: 3, Quorum: 2,
				DownAfter: DefaultDownAfter, FailoverTimeout: DefaultFailoverTimeout},
		},
		{
			name: "no replicas, five sentinels",
			in:   SentinelOptions{MasterName: "m", Replicas: -1, Sentinels: 5},
			want: SentinelOptions{MasterName: "m", Replicas: 0, Sentinels: 5, Quorum: 3,
				DownAfter: DefaultDownAfter, FailoverTimeout: DefaultFailoverTimeout},
		},
		{name: "bad replicas", in: SentinelOptions{Replicas: -2}, wantErr: "Replicas -2"},
		{name: "bad sentinels", in: SentinelOptions{Sentinels: -1}, wantErr: "Sentinels -1"},
		{name: "quorum above sentinels", in: SentinelOptions{Sentinels: 1, Quorum: 2}, wantErr: "Quorum 2"},
		{name: "name with space", in: SentinelOptions{MasterName: "a b"}, wantErr: "MasterName"},
		{name: "negative timeout", in: SentinelOptions{DownAfter: -time.Second}, wantErr: "DownAfter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := tt.in.withDefaults()
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("withDefaults() error = %v, want one mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("withDefaults() = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}
