package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// ErrLoadFailed is returned when a load run completed with errors.
var ErrLoadFailed = errors.New("load run had failed requests")

// FortioResult is what we read from fortio's JSON.
type FortioResult struct {
	ActualQPS   float64
	Count       int64
	OK          int64   // requests answered 200 (HTTP) or echoed (TCP)
	P50, P90    float64 // seconds
	P99, Avg    float64
	Connections int64
}

type fortioJSON struct {
	ActualQPS         float64
	RetCodes          map[string]int64
	Sockets           []int64
	DurationHistogram struct {
		Count       int64
		Avg         float64
		Percentiles []struct {
			Percentile float64
			Value      float64
		}
	}
}

// ParseFortio reads fortio's -json output.
func ParseFortio(b []byte) (FortioResult, error) {
	var j fortioJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return FortioResult{}, fmt.Errorf("failed to decode fortio result: %w", err)
	}
	r := FortioResult{ActualQPS: j.ActualQPS, Count: j.DurationHistogram.Count, Avg: j.DurationHistogram.Avg}
	r.OK = j.RetCodes["200"] + j.RetCodes["SERVING"]
	for _, s := range j.Sockets {
		r.Connections += s
	}
	for _, p := range j.DurationHistogram.Percentiles {
		switch p.Percentile {
		case 50:
			r.P50 = p.Value
		case 90:
			r.P90 = p.Value
		case 99:
			r.P99 = p.Value
		}
	}
	if r.Count == 0 {
		return r, fmt.Errorf("%w: fortio made no request", ErrLoadFailed)
	}
	return r, nil
}

// Fortio runs fortio's HTTP load inside a network namespace.
type Fortio struct {
	Bin   string // fortio binary
	Netns string // namespace name under /var/run/netns
	Dir   string // scratch directory for JSON output
}

// LoadSpec is one fortio run: qps 0 means as fast as possible.
type LoadSpec struct {
	URL       string
	QPS       float64
	Conns     int
	Duration  time.Duration
	KeepAlive bool
	// Host, when set, is the Host header of every request (fortio -H).
	Host string
}

// Run runs one load and returns its figures; any non-200 answer fails it.
func (f Fortio) Run(ctx context.Context, s LoadSpec) (FortioResult, error) {
	out := filepath.Join(f.Dir, fmt.Sprintf("fortio-%d.json", time.Now().UnixNano()))
	defer os.Remove(out)
	ctx, cancel := context.WithTimeout(ctx, s.Duration+time.Minute)
	defer cancel()
	if b, err := InNetns(ctx, f.Netns, f.Bin, s.fortioArgs(out)...).CombinedOutput(); err != nil {
		return FortioResult{}, fmt.Errorf("failed to run fortio: %w: %s", err, lastLines(string(b), 2, nil))
	}
	b, err := os.ReadFile(out)
	if err != nil {
		return FortioResult{}, fmt.Errorf("failed to read fortio result: %w", err)
	}
	r, err := ParseFortio(b)
	if err != nil {
		return r, err
	}
	if r.OK != r.Count {
		return r, fmt.Errorf("%w: %d of %d requests failed against %s", ErrLoadFailed, r.Count-r.OK, r.Count, s.URL)
	}
	return r, nil
}

// fortioArgs are `fortio load`'s arguments for s, writing its JSON to out.
func (s LoadSpec) fortioArgs(out string) []string {
	args := []string{"load", "-quiet", "-qps", strconv.FormatFloat(s.QPS, 'f', -1, 64),
		"-c", strconv.Itoa(s.Conns), "-t", s.Duration.String(), "-p", "50,90,99", "-r", "0.00001",
		"-keepalive=" + strconv.FormatBool(s.KeepAlive), "-json", out}
	if s.Host != "" {
		args = append(args, "-H", "Host: "+s.Host)
	}
	return append(args, s.URL)
}

// ParseIperf returns the received throughput in bits/s from iperf3 -J.
func ParseIperf(b []byte) (float64, error) {
	var j struct {
		Error string
		End   struct {
			SumReceived struct {
				BitsPerSecond float64 `json:"bits_per_second"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(b, &j); err != nil {
		return 0, fmt.Errorf("failed to decode iperf3 result: %w", err)
	}
	if j.Error != "" {
		return 0, fmt.Errorf("%w: iperf3: %s", ErrLoadFailed, j.Error)
	}
	if j.End.SumReceived.BitsPerSecond <= 0 {
		return 0, fmt.Errorf("%w: iperf3 received nothing", ErrLoadFailed)
	}
	return j.End.SumReceived.BitsPerSecond, nil
}

// Iperf runs an iperf3 client inside a namespace for d and returns bits/s.
func Iperf(ctx context.Context, bin, netns, host string, port int, d time.Duration) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	cmd := InNetns(ctx, netns, bin, "-c", host, "-p", strconv.Itoa(port), "-t", strconv.Itoa(int(d.Seconds())), "-J")
	b, err := cmd.Output()
	if bps, perr := ParseIperf(b); perr == nil {
		return bps, nil
	} else if err == nil {
		return 0, perr
	}
	return 0, fmt.Errorf("failed to run iperf3: %w: %s", err, lastLines(string(b), 2, nil))
}

// InNetns builds `ip netns exec NETNS name args...`.
func InNetns(ctx context.Context, netns, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", netns, name}, args...)...)
}
