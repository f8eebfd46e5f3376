package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// privateRedis is a throwaway redis-server started for the demo.
type privateRedis struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

func (p *privateRedis) stop() {
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	_ = os.RemoveAll(p.dir)
}

// startPrivateRedis starts redis-server on a free loopback port, without
// persistence, and waits (bounded) until it answers.
func startPrivateRedis(ctx context.Context) (*privateRedis, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	dir, err := os.MkdirTemp("", "streamq-demo-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	p := &privateRedis{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), cmd: cmd, dir: dir}
	rdb := redis.NewClient(&redis.Options{Addr: p.addr})
	defer rdb.Close()
	for range 100 { // up to ~5 s
		if rdb.Ping(ctx).Err() == nil {
			return p, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.stop()
	return nil, fmt.Errorf("redis-server on port %d did not answer", port)
}
