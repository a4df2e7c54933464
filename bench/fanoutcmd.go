package bench

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"
)

// ErrBadLine is returned for a line of the xdsload protocol that does not parse.
var ErrBadLine = errors.New("malformed xdsload line")

// fdHeadroom is the file descriptors a process needs beyond one per proxy.
const fdHeadroom = 512

// XDSLoad is bench/cmd/xdsload: one side of the out-of-process fan-out
// measurement, spoken over stdin/stdout with the harness (fanoutmem.go).
//
//	-role server -proxies N: start the control plane with N proxies
//	  registered and compiled, print "ready addr=A trust_domain=T
//	  empty_heap_inuse=B" (B: before registering), then
//	  answer each "sample K" line (wait until K proxies are connected) with
//	  "sample heap_inuse=... stack_inuse=... connected=..."; stop at EOF.
//	-role client -addr A -trust-domain T -proxies N -mode delta|sotw:
//	  connect N simulated proxies, print "ready proxies=N connect_ms=..."
//	  once all ACKed their initial config; disconnect at EOF.
func XDSLoad(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("xdsload", flag.ContinueOnError)
	fs.SetOutput(stderr)
	role := fs.String("role", "", "server or client")
	n := fs.Int("proxies", 0, "simulated proxies")
	addr := fs.String("addr", "", "client: the server's gRPC address")
	td := fs.String("trust-domain", "", "client: the server's trust domain")
	mode := fs.String("mode", "delta", "client: delta or sotw")
	dataDir := fs.String("data-dir", "", "server: the control plane's data dir (default: a temporary one, removed at exit)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 {
		return fmt.Errorf("failed to parse flags: -proxies must be at least 1")
	}
	if err := RaiseFileLimit(uint64(*n) + fdHeadroom); err != nil {
		return err
	}
	switch *role {
	case "server":
		return xdsLoadServer(*n, *dataDir, stdin, stdout, stderr)
	case "client":
		if *mode != "delta" && *mode != "sotw" {
			return fmt.Errorf("failed to parse flags: -mode must be delta or sotw, got %q", *mode)
		}
		c, err := StartFanoutClients(ctx, FanoutClientOptions{Addr: *addr, TrustDomain: *td, Proxies: *n, Delta: *mode == "delta"})
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(stdout, "ready proxies=%d connect_ms=%d\n", *n, c.Connect.Milliseconds())
		_, _ = io.Copy(io.Discard, stdin) // until the harness closes stdin
		return nil
	default:
		return fmt.Errorf("failed to parse flags: -role must be server or client, got %q", *role)
	}
}

func xdsLoadServer(n int, dir string, stdin io.Reader, stdout, stderr io.Writer) error {
	if dir == "" {
		tmp, cleanup, err := fanoutDataDir()
		if err != nil {
			return err
		}
		defer cleanup()
		dir = tmp
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "xdsload", Level: hclog.Error, Output: stderr})
	s, err := StartFanoutServer(FanoutServerOptions{Proxies: n, DataDir: dir, Logger: log})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(stdout, "ready addr=%s trust_domain=%s empty_heap_inuse=%d\n", s.Addr(), s.TrustDomain(), s.Empty.HeapInuse)
	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		want, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "sample ")
		k, err := strconv.Atoi(want)
		if !ok || err != nil {
			return fmt.Errorf("%w: want \"sample <connected>\", got %q", ErrBadLine, sc.Text())
		}
		if err := s.WaitConnected(k); err != nil {
			return err
		}
		h := s.Sample()
		fmt.Fprintf(stdout, "sample heap_inuse=%d heap_alloc=%d stack_inuse=%d goroutines=%d connected=%d\n",
			h.HeapInuse, h.HeapAlloc, h.StackInuse, h.Goroutines, h.Connected)
	}
	return sc.Err()
}

// ParseHeapSample parses a server's "sample ..." line.
func ParseHeapSample(line string) (HeapSample, error) {
	kv, err := parseKV(line, "sample")
	if err != nil {
		return HeapSample{}, err
	}
	var h HeapSample
	var errs []error
	num := func(key string) int64 {
		v, err := strconv.ParseInt(kv[key], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("%w: %s=%q in %q", ErrBadLine, key, kv[key], line))
		}
		return v
	}
	h.HeapInuse, h.HeapAlloc, h.StackInuse = uint64(num("heap_inuse")), uint64(num("heap_alloc")), uint64(num("stack_inuse"))
	h.Goroutines, h.Connected = int(num("goroutines")), int(num("connected"))
	if len(errs) > 0 {
		return HeapSample{}, errs[0]
	}
	return h, nil
}

// parseKV parses "<word> k=v k=v..." and checks the leading word.
func parseKV(line, word string) (map[string]string, error) {
	f := strings.Fields(line)
	if len(f) == 0 || f[0] != word {
		return nil, fmt.Errorf("%w: want %q, got %q", ErrBadLine, word, line)
	}
	kv := map[string]string{}
	for _, p := range f[1:] {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: %q is not key=value in %q", ErrBadLine, p, line)
		}
		kv[k] = v
	}
	return kv, nil
}

// RaiseFileLimit makes sure RLIMIT_NOFILE allows at least need open files,
// raising the soft limit (and the hard one, which needs root) as required.
func RaiseFileLimit(need uint64) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("failed to read the open file limit: %w", err)
	}
	if lim.Cur >= need {
		return nil
	}
	lim.Cur = need
	lim.Max = max(lim.Max, need)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("failed to raise the open file limit to %d: %w", need, err)
	}
	return nil
}
