package jobspecs

import "github.com/meshlet/meshlet/structs"

// spreads decodes the spread blocks of a job or group:
//
//	spread {
//	  attribute = "${node.datacenter}"
//	  weight    = 100
//	  target "dc1" { percent = 50 }
//	}
func (d *decoder) spreads(c content, p path) []*structs.Spread {
	var out []*structs.Spread
	for _, b := range c.blocks["spread"] {
		if !d.labels(b) {
			continue
		}
		sp := p.item("spread", len(out), "")
		d.rec(sp, b.DefRange())
		cc := d.content(b.Body, spec{attrs: []string{"attribute", "weight"}, blocks: []string{"target"}})
		s := &structs.Spread{}
		d.setStr(cc, sp, "attribute", &s.Attribute)
		d.setIntPtr(cc, sp, "weight", &s.Weight)
		for _, tb := range cc.blocks["target"] {
			if !d.labels(tb, "value") {
				continue
			}
			tp := sp.item("target", len(s.SpreadTarget), tb.Labels[0])
			d.rec(tp, tb.DefRange())
			tc := d.content(tb.Body, spec{attrs: []string{"percent"}})
			t := &structs.SpreadTarget{Value: tb.Labels[0]}
			d.setInt(tc, tp, "percent", &t.Percent)
			s.SpreadTarget = append(s.SpreadTarget, t)
		}
		out = append(out, s)
	}
	return out
}
