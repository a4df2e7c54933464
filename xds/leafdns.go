package xds

// leafDNSSetter is the optional part of a CertSource that puts extra DNS
// SANs on a service's leaf (ca.Manager.SetLeafDNS).
type leafDNSSetter interface {
	SetLeafDNS(service string, names []string) (changed bool, err error)
}

// setLeafDNS asks the CA for the DNS SANs an ingress gateway's listeners
// need on its leaf. A change re-issues the leaf; its renewal event then
// republishes the secret. Without a setter, TLS listeners still serve the
// leaf, without the DNS names.
func (s *Server) setLeafDNS(res *proxyResources) {
	set, ok := s.cfg.Certs.(leafDNSSetter)
	if !ok {
		if len(res.leafDNS) > 0 {
			s.log.Warn("CA cannot add DNS SANs to leaves; TLS listeners serve the leaf without them", "service", res.service)
		}
		return
	}
	changed, err := set.SetLeafDNS(res.service, res.leafDNS)
	if err != nil {
		s.log.Warn("failed to set the DNS SANs of an ingress gateway's leaf", "service", res.service, "error", err)
		return
	}
	if changed {
		s.log.Debug("set the DNS SANs of an ingress gateway's leaf", "service", res.service, "dns_sans", res.leafDNS)
	}
}
