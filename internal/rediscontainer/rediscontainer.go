// Package rediscontainer starts a throwaway Redis in a Docker container with
// testcontainers-go: the last resort of the tests when neither REDIS_ADDR
// nor a redis-server binary gives them a server.
//
// It is a package of its own so that only the test binaries that ask for it
// link testcontainers-go and the Docker client: the project's own tests pass
// [Start] to redistest.Run, users' tests get it through
// streamqtest/containers. Package streamqtest itself never links it.
package rediscontainer

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
)

const (
	// image is the image Start runs.
	image = "redis:7"

	// healthTimeout bounds the check that a Docker engine answers.
	healthTimeout = 10 * time.Second
	// startTimeout bounds starting the container, image pull included.
	startTimeout = 3 * time.Minute
	// stopTimeout bounds removing the container.
	stopTimeout = 30 * time.Second
)

// Start runs a redis:7 container and returns its address (host:port) and a
// function that removes it. It first asks the Docker engine for its health
// with a short timeout, so that a machine without Docker fails fast, and
// turns the panics that testcontainers-go raises when it finds no Docker
// host into errors (each starting with "testcontainers: "). The caller
// checks that the server answers.
func Start() (addr string, stop func(), err error) {
	defer func() {
		if r := recover(); r != nil {
			addr, stop, err = "", nil, fmt.Errorf("no usable Docker engine: %v", r)
		}
		if err != nil {
			err = fmt.Errorf("testcontainers: %w", err)
		}
	}()
	provider, err := testcontainers.ProviderDefault.GetProvider()
	if err != nil {
		return "", nil, fmt.Errorf("no usable Docker engine: %w", err)
	}
	hctx, hcancel := context.WithTimeout(context.Background(), healthTimeout)
	err = provider.Health(hctx) // Health also closes the provider.
	hcancel()
	if err != nil {
		return "", nil, fmt.Errorf("no usable Docker engine: %w", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	ctr, err := tcredis.Run(ctx, image)
	terminate := func() {
		if ctr == nil {
			return
		}
		tctx, tcancel := context.WithTimeout(context.Background(), stopTimeout)
		defer tcancel()
		if err := testcontainers.TerminateContainer(ctr, testcontainers.StopContext(tctx)); err != nil {
			fmt.Fprintf(os.Stderr, "rediscontainer: removing the redis container: %v\n", err)
		}
	}
	if err != nil {
		terminate()
		return "", nil, fmt.Errorf("start %s container: %w", image, err)
	}
	addr, err = ctr.PortEndpoint(ctx, "6379/tcp", "")
	if err != nil {
		terminate()
		return "", nil, fmt.Errorf("address of the %s container: %w", image, err)
	}
	return addr, terminate, nil
}
