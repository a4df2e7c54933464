package echotest

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"
)

// The app greets (when asked to), echoes, counts, and on Close ends open
// connections and refuses new ones.
func TestApp(t *testing.T) {
	cases := []struct{ name, greeting, wantFirst string }{
		{"greeting", "db-0", "db-0\n"},
		{"no greeting", "", "ping\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := Start(t, tc.greeting)
			c, err := net.DialTimeout("tcp", a.Addr(), 10*time.Second)
			if err != nil {
				t.Fatalf("failed to dial the app: %v", err)
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			if _, err := io.WriteString(c, "ping\n"); err != nil {
				t.Fatalf("failed to write: %v", err)
			}
			br := bufio.NewReader(c)
			if line, err := br.ReadString('\n'); err != nil || line != tc.wantFirst {
				t.Fatalf("first line = %q, %v; want %q", line, err, tc.wantFirst)
			}
			if tc.greeting != "" {
				if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
					t.Fatalf("echo = %q, %v; want %q", line, err, "ping\n")
				}
			}
			if a.Conns() != 1 || a.Bytes() != 5 {
				t.Fatalf("counters = %d conns, %d bytes; want 1, 5", a.Conns(), a.Bytes())
			}
			a.Close()
			if _, err := br.ReadByte(); err == nil {
				t.Fatal("connection still open after Close")
			}
			if c2, err := net.DialTimeout("tcp", a.Addr(), 10*time.Second); err == nil {
				c2.Close()
				t.Fatal("app still accepts connections after Close")
			}
			a.Close() // idempotent; the cleanup calls it again too
		})
	}
}
