package connect

import (
	"context"
	"fmt"
	"slices"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/structs"
)

// IngressEntries returns the ingress-gateway config entry of every ingress
// gateway service of the job, as Nomad writes them to Consul when the job
// is registered: named after the gateway service, with its listeners.
func IngressEntries(job *structs.Job) []*consul.IngressGatewayConfigEntry {
	var out []*consul.IngressGatewayConfigEntry
	for _, tg := range job.TaskGroups {
		for _, s := range GatewayServices(tg) {
			if s.Connect.IsIngress() {
				out = append(out, ingressEntry(s.Name, s.Connect.Gateway.Ingress))
			}
		}
	}
	return out
}

// TerminatingEntries returns the terminating-gateway config entry of every
// terminating gateway service of the job, as Nomad writes them to Consul
// when the job is registered: named after the gateway service, with its
// linked services.
func TerminatingEntries(job *structs.Job) []*consul.TerminatingGatewayConfigEntry {
	var out []*consul.TerminatingGatewayConfigEntry
	for _, tg := range job.TaskGroups {
		for _, s := range GatewayServices(tg) {
			if !s.Connect.IsTerminating() {
				continue
			}
			e := &consul.TerminatingGatewayConfigEntry{Kind: configentry.TerminatingGateway, Name: s.Name}
			for _, ls := range s.Connect.Gateway.Terminating.Services {
				if ls != nil {
					e.Services = append(e.Services, consul.LinkedService{
						Name: ls.Name, CAFile: ls.CAFile, CertFile: ls.CertFile, KeyFile: ls.KeyFile, SNI: ls.SNI,
					})
				}
			}
			out = append(out, e)
		}
	}
	return out
}

// GatewayEntries returns the config entries a job's gateways write:
// ingress-gateway, then terminating-gateway entries.
func GatewayEntries(job *structs.Job) []configentry.Entry {
	var out []configentry.Entry
	for _, e := range IngressEntries(job) {
		out = append(out, e)
	}
	for _, e := range TerminatingEntries(job) {
		out = append(out, e)
	}
	return out
}

func ingressEntry(name string, in *structs.ConsulIngressConfigEntry) *consul.IngressGatewayConfigEntry {
	e := &consul.IngressGatewayConfigEntry{Kind: configentry.IngressGateway, Name: name}
	if in.TLS != nil {
		e.TLS = *gatewayTLS(in.TLS)
	}
	for _, l := range in.Listeners {
		if l == nil {
			continue
		}
		il := consul.IngressListener{Port: l.Port, Protocol: l.Protocol}
		for _, s := range l.Services {
			if s != nil {
				is := consul.IngressService{Name: s.Name, Hosts: s.Hosts}
				if s.TLS != nil && s.TLS.SDS != nil {
					is.TLS = &consul.GatewayServiceTLSConfig{SDS: &consul.GatewayTLSSDSConfig{ClusterName: s.TLS.SDS.ClusterName, CertResource: s.TLS.SDS.CertResource}}
				}
				il.Services = append(il.Services, is)
			}
		}
		e.Listeners = append(e.Listeners, il)
	}
	return e
}

// EntryWriter writes a config entry (meshstate.Store, on a server).
type EntryWriter interface {
	PutConfigEntry(ctx context.Context, e configentry.Entry, cas *uint64) (ok bool, index uint64, err error)
}

// IngressEntryTimeout bounds the config entry writes of one registration.
const IngressEntryTimeout = 10 * time.Second

// EntryMutator writes the gateway config entries of a job at its
// registration (a server.JobMutator, after Mutator); a write that fails
// (an invalid entry, the state store unreachable) rejects the job, as a
// failed Consul write does in Nomad. Writing the same entry again is
// harmless, so it is idempotent.
type EntryMutator struct{ Writer EntryWriter }

// Name implements server.JobMutator.
func (EntryMutator) Name() string { return "connect-gateway-entries" }

// Mutate implements server.JobMutator.
func (m EntryMutator) Mutate(job *structs.Job) ([]string, error) {
	entries := GatewayEntries(job)
	if len(entries) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), IngressEntryTimeout)
	defer cancel()
	for _, e := range entries {
		if _, _, err := m.Writer.PutConfigEntry(ctx, e, nil); err != nil {
			return nil, fmt.Errorf("failed to write config entry %s/%s: %w", e.GetKind(), e.GetName(), err)
		}
	}
	return nil, nil
}

// gatewayTLS is a jobspec tls block as Consul's (nil stays nil).
func gatewayTLS(t *structs.ConsulGatewayTLSConfig) *consul.GatewayTLSConfig {
	if t == nil {
		return nil
	}
	out := &consul.GatewayTLSConfig{Enabled: t.Enabled, TLSMinVersion: t.TLSMinVersion, TLSMaxVersion: t.TLSMaxVersion,
		CipherSuites: slices.Clone(t.CipherSuites)}
	if t.SDS != nil {
		out.SDS = &consul.GatewayTLSSDSConfig{ClusterName: t.SDS.ClusterName, CertResource: t.SDS.CertResource}
	}
	return out
}
