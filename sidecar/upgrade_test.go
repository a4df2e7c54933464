package sidecar

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// upgradeApp echoes on upgraded connections and counts the requests it
// got.
func upgradeApp(seen *atomic.Int32) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		hijackEcho(w, r)
	})
}

// upgradeThrough sends an upgrade to kind through web and returns the
// status; after a 101 it checks the echo, after a refusal that the
// connection was closed.
func upgradeThrough(t *testing.T, m *httpMesh, kind string) int {
	t.Helper()
	c, br := rawConn(t, m)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", kind)
	resp, _ := readResp(t, br, http.MethodGet)
	if resp.StatusCode != http.StatusSwitchingProtocols {
		if !resp.Close {
			t.Errorf("refused upgrade %q: connection kept open", kind)
		}
		if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
			t.Errorf("refused upgrade %q: read after the answer = %v, want EOF", kind, err)
		}
		return resp.StatusCode
	}
	fmt.Fprintf(c, "ping\n")
	if line, err := br.ReadString('\n'); err != nil || line != "ping\n" {
		t.Fatalf("upgrade %q: echo = %q, %v", kind, line, err)
	}
	return resp.StatusCode
}

// Only the upgrade types an HCM lists (websocket, as meshlet's do) are
// relayed, matched without regard to case; another is refused with 403
// and the connection closed, as Envoy does, without reaching the app.
func TestHTTPMeshUpgradeTypeRestricted(t *testing.T) {
	var seen atomic.Int32
	m := newHTTPMesh(t, upgradeApp(&seen))
	if code := upgradeThrough(t, m, "WebSocket"); code != http.StatusSwitchingProtocols {
		t.Fatalf("websocket upgrade answered %d, want 101", code)
	}
	if code := upgradeThrough(t, m, "echo"); code != http.StatusForbidden {
		t.Fatalf("unlisted upgrade answered %d, want 403", code)
	}
	if n := seen.Load(); n != 1 {
		t.Fatalf("app got %d requests, want 1 (the refused upgrade must not reach it)", n)
	}
	if n := statValue(t, m.web, "http.upstream.api.downstream_rq_ws_on_non_ws_route"); n != 1 {
		t.Fatalf("refused upgrades counted %d, want 1", n)
	}
}

// A route's upgrade_configs override the HCM's: web's route disables
// websocket and enables echo, which api's HCM (websocket only) refuses.
func TestHTTPMeshRouteUpgradeConfigs(t *testing.T) {
	var seen atomic.Int32
	m := newHTTPMeshRoutes(t, upgradeApp(&seen), func(rc *routev3.RouteConfiguration) {
		rc.GetVirtualHosts()[0].GetRoutes()[0].GetRoute().UpgradeConfigs = []*routev3.RouteAction_UpgradeConfig{
			{UpgradeType: "websocket", Enabled: wrapperspb.Bool(false)},
			{UpgradeType: "ECHO"},
		}
	})
	if code := upgradeThrough(t, m, "websocket"); code != http.StatusForbidden {
		t.Fatalf("upgrade disabled on the route answered %d, want 403", code)
	}
	if n := statValue(t, m.web, "http.upstream.api.downstream_rq_ws_on_non_ws_route"); n != 1 {
		t.Fatalf("web refused %d upgrades, want 1", n)
	}
	if code := upgradeThrough(t, m, "echo"); code != http.StatusForbidden {
		t.Fatalf("echo upgrade answered %d, want 403 from api", code)
	}
	if n := statValue(t, m.api, "http.public_listener.downstream_rq_ws_on_non_ws_route"); n != 1 {
		t.Fatalf("api refused %d upgrades, want 1 (web relays echo, as its route enables it)", n)
	}
	if n := seen.Load(); n != 0 {
		t.Fatalf("app got %d requests, want none", n)
	}
}

// upgrade_configs Envoy would refuse are refused: an empty or duplicate
// type (whatever its case), a custom filter chain the proxy cannot run.
func TestDecodeUpgradeConfigs(t *testing.T) {
	for name, ucs := range map[string][]*hcmv3.HttpConnectionManager_UpgradeConfig{
		"empty":     {{UpgradeType: ""}},
		"duplicate": {{UpgradeType: "websocket"}, {UpgradeType: "WebSocket"}},
		"filters":   {{UpgradeType: "websocket", Filters: []*hcmv3.HttpFilter{{Name: "envoy.filters.http.router"}}}},
	} {
		if _, err := decodeHCMUpgrades(ucs); !errors.Is(err, errUpgradeConfig) {
			t.Errorf("%s: error = %v, want errUpgradeConfig", name, err)
		}
	}
	hcm, err := decodeHCMUpgrades([]*hcmv3.HttpConnectionManager_UpgradeConfig{
		{UpgradeType: "websocket"}, {UpgradeType: "spdy/3.1", Enabled: wrapperspb.Bool(false)},
	})
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	route := upgradeRules{{kind: "spdy/3.1", enabled: true}}
	for _, tc := range []struct {
		kind     string
		rt       upgradeRules
		want     bool
		scenario string
	}{
		{"WEBSOCKET", nil, true, "listed, any case"},
		{"spdy/3.1", nil, false, "listed, disabled"},
		{"spdy/3.1", route, true, "disabled, enabled on the route"},
		{"websocket", upgradeRules{{kind: "websocket"}}, false, "disabled on the route"},
		{"h2", nil, false, "not listed"},
	} {
		if got := upgradeAllowed(hcm, tc.rt, tc.kind); got != tc.want {
			t.Errorf("%s: upgradeAllowed(%q) = %v, want %v", tc.scenario, tc.kind, got, tc.want)
		}
	}
	if upgradeAllowed(nil, nil, "websocket") {
		t.Error("an HCM without upgrade_configs allows websocket")
	}
}

// An upgraded connection on which nobody sends anything for the stream
// idle timeout is closed at both ends, as Envoy's stream_idle_timeout
// does; bytes in either direction keep it open (here, the client alone
// talks for several timeouts).
func TestHTTPMeshUpgradeIdleClosed(t *testing.T) {
	shortenStreamIdle(t, 300*time.Millisecond)
	appDone := make(chan error, 1)
	m := newHTTPMesh(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
		brw.Flush()
		_ = conn.SetReadDeadline(time.Now().Add(waitTimeout))
		for {
			line, err := brw.ReadString('\n')
			if err != nil {
				appDone <- err
				return
			}
			if strings.HasPrefix(line, "echo") { // only these are answered
				brw.WriteString(line)
				brw.Flush()
			}
		}
	}))
	c, br := rawConn(t, m)
	fmt.Fprintf(c, "GET /ws HTTP/1.1\r\nHost: api\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade response = %v, %v", resp, err)
	}
	echo := func(br *bufio.Reader, msg string) {
		t.Helper()
		fmt.Fprintf(c, "%s\n", msg)
		if line, err := br.ReadString('\n'); err != nil || line != msg+"\n" {
			t.Fatalf("echo of %q = %q, %v", msg, line, err)
		}
	}
	echo(br, "echo 1")
	for i := 0; i < 12; i++ { // 1.2 s of one-way traffic: four timeouts
		time.Sleep(100 * time.Millisecond)
		fmt.Fprintf(c, "x\n")
	}
	echo(br, "echo 2")
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF && !isConnReset(err) {
		t.Fatalf("idle upgraded connection still open at the client after %s: %v", time.Since(start), err)
	}
	select {
	case err := <-appDone:
		if err != io.EOF && !isConnReset(err) {
			t.Fatalf("idle upgraded connection at the app ended with %v, want closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("idle upgraded connection still open at the app")
	}
}
