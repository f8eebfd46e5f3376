package rediscontainer

import (
	"os"
	"testing"
	"time"
)

func TestStart_NoDockerFailsFast(t *testing.T) {
	t.Parallel()
	if os.Getenv("DOCKER_HOST") != "" {
		t.Skip("DOCKER_HOST is set: this test covers machines without Docker")
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		t.Skip("/var/run/docker.sock exists: this test covers machines without Docker")
	}
	start := time.Now()
	a, stop, err := Start()
	if err == nil {
		stop()
		t.Fatalf("Start() = %q without a Docker socket, want an error", a)
	}
	t.Logf("Start without Docker: %v", err)
	if elapsed := time.Since(start); elapsed > healthTimeout+5*time.Second {
		t.Errorf("Start took %v to fail, want it bounded by the health check", elapsed)
	}
}
