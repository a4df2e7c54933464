package sidecar

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
)

// adminMux serves the Envoy-compatible admin endpoints.
func (p *Proxy) adminMux() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ready", p.handleReady)
	mux.HandleFunc("GET /stats", p.handleStats)
	mux.HandleFunc("GET /clusters", p.handleClusters)
	mux.HandleFunc("GET /config_dump", p.handleConfigDump)
	mux.HandleFunc("GET /listeners", p.handleListeners)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "meshlet sidecar admin\n  /ready\n  /stats\n  /clusters\n  /config_dump\n  /listeners\n")
	})
	return mux
}

func (p *Proxy) handleReady(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !p.Ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		io.WriteString(w, "PRE_INITIALIZING\n")
		return
	}
	io.WriteString(w, "LIVE\n")
}

func (p *Proxy) handleStats(w http.ResponseWriter, r *http.Request) {
	var filter *regexp.Regexp
	if f := r.URL.Query().Get("filter"); f != "" {
		re, err := regexp.Compile(f)
		if err != nil {
			http.Error(w, fmt.Sprintf("invalid filter regex: %v", err), http.StatusBadRequest)
			return
		}
		filter = re
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_ = p.stats.writeText(w, filter)
}

// handleClusters prints Envoy's text format: cluster-wide lines, then per
// host "<cluster>::<ip:port>::<stat>::<value>".
func (p *Proxy) handleClusters(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	clusters := p.clusters.all()
	names := make([]string, 0, len(clusters))
	for n := range clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		st := clusters[name].state.Load()
		if st == nil {
			continue
		}
		fmt.Fprintf(&b, "%s::observability_name::%s\n", name, name)
		fmt.Fprintf(&b, "%s::added_via_api::true\n", name)
		if st.cfg.eds {
			fmt.Fprintf(&b, "%s::eds_service_name::%s\n", name, st.cfg.edsName)
		}
		for _, h := range st.hosts {
			pre := name + "::" + h.ep.addr + "::"
			s := h.stats
			for _, kv := range []struct {
				k string
				v any
			}{
				{"cx_active", s.cxActive.Load()}, {"cx_connect_fail", s.cxConnectFail.Load()},
				{"cx_total", s.cxTotal.Load()}, {"rq_active", s.rqActive.Load()},
				{"rq_error", s.rqError.Load()}, {"rq_success", s.rqSuccess.Load()},
				{"rq_timeout", s.rqTimeout.Load()}, {"rq_total", s.rqTotal.Load()},
				{"hostname", h.ep.hostname}, {"health_flags", h.ep.healthFlag},
				{"weight", h.ep.weight}, {"region", h.ep.region}, {"zone", h.ep.zone},
				{"sub_zone", h.ep.subZone}, {"canary", false}, {"priority", h.ep.priority},
				{"success_rate", -1}, {"local_origin_success_rate", -1},
			} {
				fmt.Fprintf(&b, "%s%s::%v\n", pre, kv.k, kv.v)
			}
		}
	}
	io.WriteString(w, b.String())
}

func (p *Proxy) handleConfigDump(w http.ResponseWriter, _ *http.Request) {
	d, err := p.configDump()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	b, err := protojson.MarshalOptions{Indent: "  ", UseProtoNames: true}.Marshal(d)
	if err != nil {
		http.Error(w, fmt.Sprintf("failed to marshal config dump: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// handleListeners prints "<name>::<address>" per active listener, like
// Envoy's /listeners.
func (p *Proxy) handleListeners(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	active := p.listeners.active()
	names := make([]string, 0, len(active))
	for n := range active {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "%s::%s\n", n, active[n].cfg.(*listenerConfig).addr)
	}
}
