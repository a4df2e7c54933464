// Package demoapp holds the small programs meshlet's example jobs, demo and
// end-to-end tests run as tasks (`meshlet demo-app <name>`): a TCP echo
// server, an HTTP counter, a dashboard that reads the counter through its
// upstream, an HTTP service that merges its upstream's answer into its own,
// a gRPC server naming itself in a header, and tiny clients (TCP, HTTP and
// gRPC) for use inside an allocation where no nc, curl or grpcurl may exist. They use only the addresses they are given.
package demoapp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"
)

// app is one demo program.
type app struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var apps = map[string]app{
	"echo":       {"TCP echo server: -listen ADDR", runEcho},
	"counting":   {"HTTP counter answering {\"count\":N}: -listen ADDR", runCounting},
	"dashboard":  {"HTTP page showing the count read from -counting-url: -listen ADDR", runDashboard},
	"hello":      {"HTTP service answering -path with its -id, merging its -upstream's answer on /", runHello},
	"tcp-client": {"send -message to -addr over TCP and print the reply", runTCPClient},
	"get":        {"HTTP GET a URL and print the body (exit 1 on a non-2xx status)", runGet},
	"grpc-hello": {"gRPC server (plaintext HTTP/2) answering grpc.health.v1 with its -id in a header: -listen ADDR", runGRPCHello},
	"grpc-get":   {"call grpc.health.v1 Check -n times over one connection: \"OK <id>\" or \"error <code>\" per call", runGRPCGet},
}

// Main runs `meshlet demo-app NAME ARGS...` and returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		usage(stderr)
		return 1
	}
	a, ok := apps[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "Error: unknown demo app %q\n", args[0])
		usage(stderr)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := a.run(ctx, args[1:], stdout, stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: meshlet demo-app NAME [options]")
	fmt.Fprintln(w, "\nDemo programs for example jobs and tests:")
	names := make([]string, 0, len(apps))
	for n := range apps {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-11s %s\n", n, apps[n].summary)
	}
	fmt.Fprintln(w, "\nExample: meshlet demo-app echo -listen 127.0.0.1:9090")
}

// serveHTTP serves h on addr until ctx ends.
func serveHTTP(ctx context.Context, addr string, h http.Handler, stdout io.Writer) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s: %w", addr, err)
	}
	fmt.Fprintf(stdout, "listening on %s\n", l.Addr())
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("failed to serve HTTP: %w", err)
	}
	return nil
}

func newFlags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("demo-app "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}
