package sidecar

import (
	"io"
	"net"
	"testing"
	"time"
)

// BenchmarkProxyTCP measures an echo round trip of a 16 KiB chunk straight
// to the app and through web -> (mTLS) -> db. ns/op is the round-trip time,
// MB/s the echoed throughput.
func BenchmarkProxyTCP(b *testing.B) {
	const chunk = 16 << 10
	m := newMesh(b, meshOptions{greetless: true})
	targets := []struct {
		name string
		addr string
	}{
		{"direct", m.dbs[0].app.addr()},
		{"two_proxies", m.webAddr()},
	}
	for _, tg := range targets {
		b.Run(tg.name, func(b *testing.B) {
			c, err := net.DialTimeout("tcp", tg.addr, 10*time.Second)
			if err != nil {
				b.Fatalf("failed to dial: %v", err)
			}
			defer c.Close()
			out := make([]byte, chunk)
			in := make([]byte, chunk)
			b.SetBytes(chunk)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if _, err := c.Write(out); err != nil {
					b.Fatalf("write: %v", err)
				}
				if _, err := io.ReadFull(c, in); err != nil {
					b.Fatalf("read: %v", err)
				}
			}
		})
	}
}
