package demoapp

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

func runTCPClient(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("tcp-client", stderr)
	addr := fs.String("addr", "127.0.0.1:9191", "address to connect to")
	msg := fs.String("message", "hello world", "message to send")
	timeout := fs.Duration("timeout", 3*time.Second, "overall deadline (each exchange's, with -hold)")
	hold := fs.Duration("hold", 0, "keep the one connection open this long, exchanging the message every -every; one line per exchange: \"<unix-ms> ok\", and a last \"<unix-ms> closed <reason>\" if the connection ends early")
	every := fs.Duration("every", 100*time.Millisecond, "pause between exchanges (with -hold)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	d := net.Dialer{Timeout: *timeout}
	c, err := d.DialContext(ctx, "tcp", *addr)
	if err != nil {
		return fmt.Errorf("failed to connect to %s: %w", *addr, err)
	}
	defer c.Close()
	if *hold > 0 {
		holdConn(ctx, c, *msg, *hold, *every, *timeout, stdout)
		return nil
	}
	_ = c.SetDeadline(time.Now().Add(*timeout))
	if err := exchange(c, *msg); err != nil {
		return err
	}
	fmt.Fprintln(stdout, *msg)
	return nil
}

// exchange sends msg on c and reads its echo.
func exchange(c net.Conn, msg string) error {
	if _, err := io.WriteString(c, msg); err != nil {
		return fmt.Errorf("failed to send: %w", err)
	}
	buf := make([]byte, len(msg))
	if _, err := io.ReadFull(c, buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return fmt.Errorf("connection closed before a reply: %w", err)
		}
		return fmt.Errorf("failed to read reply: %w", err)
	}
	return nil
}

// holdConn exchanges msg on the one connection c every interval until
// hold passes, ctx ends or the connection fails, one timestamped line each.
func holdConn(ctx context.Context, c net.Conn, msg string, hold, every, timeout time.Duration, stdout io.Writer) {
	ctx, cancel := context.WithTimeout(ctx, hold)
	defer cancel()
	for ctx.Err() == nil {
		_ = c.SetDeadline(time.Now().Add(timeout))
		if err := exchange(c, msg); err != nil {
			fmt.Fprintf(stdout, "%d closed %v\n", time.Now().UnixMilli(), err)
			return
		}
		fmt.Fprintf(stdout, "%d ok\n", time.Now().UnixMilli())
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func runGet(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("get", stderr)
	timeout := fs.Duration("timeout", 5*time.Second, "request timeout")
	n := fs.Int("n", 1, "number of requests (1 to 10000); when given, each answer is one line \"<status> <body>\" or \"error <reason>\" and the exit code is 0")
	every := fs.Duration("every", 0, "pause between requests (with -n)")
	var hdrs headerFlag
	fs.Var(&hdrs, "header", "a request header, `Name:Value` (repeatable)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 || *n < 1 || *n > 10000 {
		return errors.New("usage: meshlet demo-app get [-timeout D] [-header Name:Value]... [-n 1..10000 [-every D]] URL")
	}
	client := &http.Client{Timeout: *timeout, Transport: headerTransport{h: http.Header(hdrs)}}
	many := false
	fs.Visit(func(f *flag.Flag) { many = many || f.Name == "n" })
	if many {
		return getMany(ctx, client, fs.Arg(0), *n, *every, stdout)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fs.Arg(0), nil)
	if err != nil {
		return fmt.Errorf("failed to build request: %w", err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("failed to GET %s: %w", fs.Arg(0), err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(stdout, resp.Body); err != nil {
		return fmt.Errorf("failed to read body: %w", err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s", fs.Arg(0), resp.Status)
	}
	return nil
}

// getMany makes n requests, one line of output each, and fails only when
// the context ends.
func getMany(ctx context.Context, client *http.Client, url string, n int, every time.Duration, stdout io.Writer) error {
	for i := 0; i < n; i++ {
		if i > 0 && every > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(every):
			}
		}
		fmt.Fprintln(stdout, getLine(ctx, client, url))
	}
	return nil
}

func getLine(ctx context.Context, client *http.Client, url string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "error " + err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return "error " + err.Error()
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.Join(strings.Fields(string(b)), " "))
}

// headerFlag collects -header Name:Value flags.
type headerFlag http.Header

func (f *headerFlag) String() string { return fmt.Sprint(http.Header(*f)) }

func (f *headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	if !ok || strings.TrimSpace(name) == "" {
		return fmt.Errorf("header %q is not Name:Value", v)
	}
	if *f == nil {
		*f = headerFlag{}
	}
	http.Header(*f).Add(strings.TrimSpace(name), strings.TrimSpace(value))
	return nil
}

// headerTransport adds the -header flags to every request.
type headerTransport struct{ h http.Header }

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.h) > 0 {
		r = r.Clone(r.Context())
		for k, vs := range t.h {
			for _, v := range vs {
				r.Header.Add(k, v)
			}
		}
	}
	return http.DefaultTransport.RoundTrip(r)
}
