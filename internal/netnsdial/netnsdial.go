// Package netnsdial connects from inside a network namespace: a health
// check of an allocation, or a bench probing one, dials the allocation's
// loopback this way.
package netnsdial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/containernetworking/plugins/pkg/ns"
)

// Dialer connects from inside the network namespace at Path ("" = the
// host's).
//
// A socket belongs to the namespace of the thread that created it, and
// keeps it afterwards. So each dial runs on a fresh goroutine locked to an
// OS thread that has entered the namespace (ns.WithNetNSPath: it saves the
// thread's namespace, setns(CLONE_NEWNET) into the target, and switches
// back; if switching back fails it leaves the thread locked so the runtime
// discards it). The dial inside must not start goroutines that create
// sockets: that rules out Happy Eyeballs and DNS, so names are resolved
// first, on the host, and each address is dialed on its own.
type Dialer struct {
	path   string
	dialer net.Dialer
	// Resolver resolves names (on the host) before the dial; nil: the
	// default resolver.
	Resolver *net.Resolver
}

// New returns a Dialer for the namespace at path ("" = the host's).
func New(path string) *Dialer {
	return &Dialer{path: path}
}

// DialContext has net.Dialer.DialContext's signature, for http.Transport
// and grpc.WithContextDialer.
func (n *Dialer) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	if n.path == "" {
		return n.dialer.DialContext(ctx, network, addr)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("failed to parse address %q: %w", addr, err)
	}
	ips, err := n.resolve(ctx, host)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, ip := range ips {
		conn, err := n.dialIn(ctx, network, net.JoinHostPort(ip.String(), port))
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// resolve returns host's addresses; an IP literal is its own answer.
func (n *Dialer) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{ip}, nil
	}
	r := n.Resolver
	if r == nil {
		r = net.DefaultResolver
	}
	ips, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, fmt.Errorf("failed to resolve %q: %w", host, err)
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("failed to resolve %q: no addresses", host)
	}
	return ips, nil
}

// dialIn dials one IP address from inside the namespace.
func (n *Dialer) dialIn(ctx context.Context, network, addr string) (net.Conn, error) {
	var conn net.Conn
	var dialErr error
	err := ns.WithNetNSPath(n.path, func(ns.NetNS) error {
		conn, dialErr = n.dialer.DialContext(ctx, network, addr)
		return nil
	})
	if err != nil {
		if conn != nil {
			_ = conn.Close()
		}
		return nil, fmt.Errorf("failed to enter network namespace %s: %w", n.path, err)
	}
	return conn, dialErr
}
