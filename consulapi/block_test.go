package consulapi

import (
	"net/http"
	"testing"
	"time"
)

// ?index=0 is not a blocking query in Consul (a client that has seen no
// index yet): it answers at once, even on an empty store whose own index
// is 0.
func TestIndexZeroDoesNotBlock(t *testing.T) {
	f := newFixture(t)
	client := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/v1/connect/intentions", "/v1/catalog/services", "/v1/config/service-defaults"} {
		start := time.Now()
		resp, err := client.Get(f.url + path + "?index=0&wait=2s")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != http.StatusOK || took > time.Second {
			t.Errorf("GET %s?index=0 = %d after %s; want 200 at once", path, resp.StatusCode, took)
		}
	}
}
