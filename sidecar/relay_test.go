package sidecar

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen: %v", err)
	}
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatalf("failed to dial: %v", err)
	}
	b, err := ln.Accept()
	if err != nil {
		t.Fatalf("failed to accept: %v", err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// testCert is a leaf certificate for name, signed by a throwaway test CA.
func testCert(t *testing.T, name string) tls.Certificate {
	t.Helper()
	ca := newTestCA(t, name)
	l := ca.leaf(t, spiffeID(name))
	cert, err := tls.X509KeyPair([]byte(l.certPEM), []byte(l.keyPEM))
	if err != nil {
		t.Fatalf("bad key pair: %v", err)
	}
	return cert
}

// tlsPair returns the client and server ends of a TLS connection over
// loopback TCP.
func tlsPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	pair := testCert(t, "relay")
	a, b := tcpPair(t)
	cli := tls.Client(a, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	srv := tls.Server(b, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	errc := make(chan error, 1)
	go func() { errc <- srv.Handshake() }()
	if err := cli.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	return cli, srv
}

// A relay direction holds a pooled buffer while data flows, gives it back
// once the source is idle, and keeps relaying afterwards, over plain TCP
// and over TLS (whose reads must survive the idle deadline).
func TestRelayReleasesBufferWhenIdle(t *testing.T) {
	old := relayIdle
	relayIdle = 50 * time.Millisecond
	t.Cleanup(func() { relayIdle = old })
	cases := []struct {
		name string
		pair func(*testing.T) (net.Conn, net.Conn)
	}{
		{"tcp", tcpPair},
		{"tls", tlsPair},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			writer, src := tc.pair(t)
			dst, reader := tcpPair(t)
			type result struct {
				n   int64
				err error
			}
			done := make(chan result, 1)
			go func() {
				// A tcp->tcp copy would splice; hide dst's type to force the
				// buffered path for both cases.
				n, err := copyBuffered(struct{ net.Conn }{dst}, src, nil)
				dst.Close()
				done <- result{n, err}
			}()
			var want bytes.Buffer
			for round := 0; round < 2; round++ {
				chunk := bytes.Repeat([]byte{byte('a' + round)}, 200<<10)
				want.Write(chunk)
				if _, err := writer.Write(chunk); err != nil {
					t.Fatalf("round %d: write: %v", round, err)
				}
				got := make([]byte, len(chunk))
				if _, err := io.ReadFull(reader, got); err != nil || !bytes.Equal(got, chunk) {
					t.Fatalf("round %d: relayed data differs (err %v)", round, err)
				}
				testutil.WaitFor(t, waitTimeout, "the idle relay to return its buffer", func() bool {
					return relayBuffersHeld.Load() == 0
				})
			}
			writer.Close()
			rest, err := io.ReadAll(reader)
			if err != nil || len(rest) != 0 {
				t.Fatalf("after close: read %d more bytes, err %v", len(rest), err)
			}
			if r := <-done; r.err != nil || r.n != int64(want.Len()) {
				t.Fatalf("copyBuffered = %d, %v; want %d, nil", r.n, r.err, want.Len())
			}
		})
	}
}
