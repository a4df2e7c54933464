package bench

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

const goBenchOut = `goos: linux
goarch: amd64
pkg: github.com/meshlet/meshlet/xds
cpu: AMD EPYC
BenchmarkFanout/sotw/proxies=100-2         	      20	   5683072 ns/op	        30.00 affected	        16.00 connect_ms	     31771 heap_B/proxy	         4.338 p50_ms	         9.784 p99_ms
BenchmarkFanout/delta/proxies=1000-2       	      20	  14966916 ns/op	       300.0 affected	       153.0 connect_ms
--- SKIP: BenchmarkSetupTeardown
    bench_test.go:17: requires root: run as root
BenchmarkAuthorize-2   	 1000000	      1228 ns/op	         2.666 p99-µs	    814466 decisions/s	     160 B/op	       3 allocs/op
BenchmarkProxyTCP/direct        	   56379	     26280 ns/op	 623.44 MB/s
PASS
ok  	github.com/meshlet/meshlet/xds	24.205s
`

func TestParseGoBench(t *testing.T) {
	rs, problems := ParseGoBench(goBenchOut)
	if len(rs) != 4 {
		t.Fatalf("got %d results, want 4: %+v", len(rs), rs)
	}
	tests := []struct {
		name   string
		unit   string
		want   float64
		wantN  int64
		wantPk string
	}{
		{"BenchmarkFanout/sotw/proxies=100", "p99_ms", 9.784, 20, "github.com/meshlet/meshlet/xds"},
		{"BenchmarkFanout/sotw/proxies=100", "heap_B/proxy", 31771, 20, ""},
		{"BenchmarkFanout/delta/proxies=1000", "connect_ms", 153, 20, ""},
		{"BenchmarkAuthorize", "p99-µs", 2.666, 1000000, ""},
		{"BenchmarkAuthorize", "allocs/op", 3, 1000000, ""},
		{"BenchmarkProxyTCP/direct", "MB/s", 623.44, 56379, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/"+tt.unit, func(t *testing.T) {
			r, ok := Find(rs, tt.name)
			if !ok {
				t.Fatalf("%s not found", tt.name)
			}
			if got := r.Metrics[tt.unit]; got != tt.want {
				t.Errorf("%s = %v, want %v", tt.unit, got, tt.want)
			}
			if r.N != tt.wantN {
				t.Errorf("N = %d, want %d", r.N, tt.wantN)
			}
			if tt.wantPk != "" && r.Pkg != tt.wantPk {
				t.Errorf("Pkg = %q, want %q", r.Pkg, tt.wantPk)
			}
		})
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "BenchmarkSetupTeardown: bench_test.go:17: requires root") {
		t.Errorf("problems = %q", problems)
	}
}

func TestParseGoBenchRejectsNoise(t *testing.T) {
	for _, line := range []string{
		"BenchmarkX-2 notanumber 12 ns/op",
		"BenchmarkX-2 10 12",             // odd field count
		"BenchmarkX-2 10 abc ns/op",      // bad value
		"Benchmarking is fun 1 2",        // not a result
		"    BenchmarkX-2 10 12 ns/op x", // odd fields
	} {
		if rs, _ := ParseGoBench(line); len(rs) != 0 {
			t.Errorf("%q parsed as %+v", line, rs)
		}
	}
}

func TestParseFortio(t *testing.T) {
	good := `{"ActualQPS": 999.5, "RetCodes": {"200": 100}, "Sockets": [2, 3],
	"DurationHistogram": {"Count": 100, "Avg": 0.0004, "Percentiles": [
	{"Percentile": 50, "Value": 0.0003}, {"Percentile": 90, "Value": 0.0006}, {"Percentile": 99, "Value": 0.0012}]}}`
	tests := []struct {
		name    string
		in      string
		wantErr error
		check   func(t *testing.T, r FortioResult)
	}{
		{"ok", good, nil, func(t *testing.T, r FortioResult) {
			if r.P50 != 0.0003 || r.P90 != 0.0006 || r.P99 != 0.0012 || r.ActualQPS != 999.5 || r.OK != 100 || r.Connections != 5 {
				t.Errorf("got %+v", r)
			}
		}},
		{"no requests", `{"ActualQPS": 0, "DurationHistogram": {"Count": 0}}`, ErrLoadFailed, nil},
		{"not json", `fortio crashed`, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseFortio([]byte(tt.in))
			switch {
			case tt.check != nil:
				if err != nil {
					t.Fatal(err)
				}
				tt.check(t, r)
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Errorf("err = %v, want %v", err, tt.wantErr)
			case err == nil:
				t.Error("want an error")
			}
		})
	}
}

func TestParseIperf(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    float64
		wantErr bool
	}{
		{"ok", `{"end": {"sum_received": {"bytes": 10, "bits_per_second": 1.44e10}}}`, 1.44e10, false},
		{"server busy", `{"start": {}, "error": "the server is busy running a test. try again later"}`, 0, true},
		{"empty", `{"end": {}}`, 0, true},
		{"garbage", `iperf3: error`, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseIperf([]byte(tt.in))
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseIperf = %v, %v; want %v, err %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParsePprofTop(t *testing.T) {
	out := `File: sidecar.test
Type: cpu
Showing nodes accounting for 2.02s, 95.28% of 2.12s total
      flat  flat%   sum%        cum   cum%
     1.70s 80.19% 80.19%      1.70s 80.19%  internal/runtime/syscall/linux.Syscall6
     0.12s  5.66% 85.85%      0.12s  5.66%  crypto/internal/fips140/aes/gcm.gcmAesEnc
     0.02s  0.94% 92.92%      0.60s 28.30%  github.com/meshlet/meshlet/sidecar.(*tcpProxy).pipe (inline)
     0.01s  0.47% 93.40%      0.25s 11.79%  runtime.gcBgMarkWorker
`
	es := ParsePprofTop(out)
	if len(es) != 4 {
		t.Fatalf("got %d entries: %+v", len(es), es)
	}
	if es[2].Func != "github.com/meshlet/meshlet/sidecar.(*tcpProxy).pipe" || es[2].CumPct != 28.30 || es[0].FlatPct != 80.19 {
		t.Errorf("entries: %+v", es)
	}
	s := Summarize("proxy", es, es, "meshlet/meshlet/", 2)
	for _, want := range []string{"`linux.Syscall6` 80%", "`gcm.gcmAesEnc` 6%", "`sidecar.(*tcpProxy).pipe` 28%", "garbage collection 12%", "System calls take 80%"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
	if strings.Contains(s, "AES-GCM") {
		t.Errorf("summary %q calls 6%% of AES a finding", s)
	}
}

func TestParseProc(t *testing.T) {
	stat := "1234 (meshlet (connect)) S 1 1234 1234 0 -1 4194560 5000 0 0 0 250 50 0 0 20 0 12 0 100 2000000 3000 18446744073709551615"
	cpu, err := ParseProcStat(stat)
	if err != nil || math.Abs(cpu-3.0) > 1e-9 {
		t.Errorf("ParseProcStat = %v, %v; want 3.0 s", cpu, err)
	}
	if _, err := ParseProcStat("1234 meshlet S"); err == nil {
		t.Error("stat without a command field parsed")
	}
	rss, err := ParseVmRSS("Name:\tmeshlet\nVmPeak:\t  100 kB\nVmRSS:\t   20480 kB\n")
	if err != nil || rss != 20480<<10 {
		t.Errorf("ParseVmRSS = %v, %v", rss, err)
	}
	if _, err := ParseVmRSS("Name:\tkthreadd\n"); err == nil {
		t.Error("status without VmRSS parsed")
	}
}

func TestCmdlineMatches(t *testing.T) {
	tests := []struct {
		cmd            string
		match, exclude []string
		want           bool
	}{
		{"/bin/meshlet connect sidecar -proxy-id x", []string{"connect"}, []string{"executor"}, true},
		{"/bin/meshlet executor connect", []string{"connect"}, []string{"executor"}, false},
		{"/bin/meshlet demo-app counting -listen 0.0.0.0:9001", []string{"demo-app", "counting"}, nil, true},
		{"/bin/meshlet demo-app echo", []string{"demo-app", "counting"}, nil, false},
	}
	for _, tt := range tests {
		if got := cmdlineMatches(tt.cmd, tt.match, tt.exclude); got != tt.want {
			t.Errorf("cmdlineMatches(%q, %v, %v) = %v", tt.cmd, tt.match, tt.exclude, got)
		}
	}
}

func TestPercentile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := percentile(ds, tt.p); got != tt.want {
			t.Errorf("p%v = %v, want %v", tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 50); got != 0 {
		t.Errorf("empty p50 = %v", got)
	}
}
