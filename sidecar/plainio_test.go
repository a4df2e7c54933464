package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// The proxy relays bytes exactly with its default data path and with
// PlainIO (turned on here through the environment, as an operator would):
// a 4 MiB TCP stream each way through web -> (mTLS) -> db, half-close
// included, and HTTP bodies through web -> (mTLS) -> api. PlainIO makes
// no raw connection and no TLS transport.
func TestProxyIOModes(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain_io=%v", plain), func(t *testing.T) {
			t.Setenv(EnvPlainIO, map[bool]string{false: "", true: "1"}[plain])
			raw, tr := rawConnsMade.Load(), tlsTransportsMade.Load()
			m := newMesh(t, meshOptions{greetless: true})
			if m.web.cfg.PlainIO != plain || m.dbs[0].proxy.cfg.PlainIO != plain {
				t.Fatalf("PlainIO = %v (web), %v (db); want %v", m.web.cfg.PlainIO, m.dbs[0].proxy.cfg.PlainIO, plain)
			}
			relayTCP(t, m.webAddr(), randomBytes(t, 4<<20))

			hm := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, err := io.ReadAll(r.Body) // all before answering: HTTP/1 is not full duplex
				if err != nil {
					http.Error(w, err.Error(), http.StatusBadRequest)
					return
				}
				_, _ = w.Write(b)
			}))
			client := &http.Client{Timeout: waitTimeout}
			t.Cleanup(client.CloseIdleConnections)
			for _, size := range []int{0, 1, 100 << 10, 2 << 20} {
				body := randomBytes(t, size)
				resp, err := client.Post(hm.webURL(), "application/octet-stream", bytes.NewReader(body))
				if err != nil {
					t.Fatalf("POST %d bytes: %v", size, err)
				}
				got, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(got, body) {
					t.Fatalf("POST %d bytes = %d, %d bytes back (%v); want 200 and the same bytes", size, resp.StatusCode, len(got), err)
				}
			}
			madeRaw, madeTransports := rawConnsMade.Load()-raw, tlsTransportsMade.Load()-tr
			if plain && (madeRaw != 0 || madeTransports != 0) {
				t.Fatalf("PlainIO made %d raw connections and %d TLS transports; want none", madeRaw, madeTransports)
			}
			if !plain && (madeRaw == 0 || madeTransports == 0) {
				t.Fatalf("the default data path made %d raw connections and %d TLS transports; want some of each", madeRaw, madeTransports)
			}
		})
	}
}

// relayTCP sends data through the echo app behind addr, half-closes, and
// checks the same bytes come back followed by EOF.
func relayTCP(t *testing.T, addr string, data []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatalf("failed to dial %s: %v", addr, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	werr := make(chan error, 1)
	go func() {
		_, err := c.Write(data)
		if err == nil {
			err = c.(*net.TCPConn).CloseWrite()
		}
		werr <- err
	}()
	got, err := io.ReadAll(c)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("relayed %d bytes, got %d back (%v); want the same bytes", len(data), len(got), err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("write: %v", err)
	}
}

// MESHLET_PROXY_PLAIN_IO turns PlainIO on, never off; a value that is not
// a boolean is refused.
func TestPlainIOEnvironment(t *testing.T) {
	cases := []struct {
		env     string
		cfg     bool
		want    bool
		wantErr bool
	}{
		{"", false, false, false},
		{"1", false, true, false},
		{"true", false, true, false},
		{"0", true, true, false},
		{"yes", false, false, true},
	}
	for _, tc := range cases {
		t.Setenv(EnvPlainIO, tc.env)
		cfg, err := Config{ProxyID: "p", XDSAddr: "127.0.0.1:1", PlainIO: tc.cfg}.withDefaults()
		if tc.wantErr {
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("%s=%q: err = %v; want ErrInvalidConfig", EnvPlainIO, tc.env, err)
			}
			continue
		}
		if err != nil || cfg.PlainIO != tc.want {
			t.Fatalf("%s=%q, PlainIO %v: got %v, %v; want %v", EnvPlainIO, tc.env, tc.cfg, cfg.PlainIO, err, tc.want)
		}
	}
}
