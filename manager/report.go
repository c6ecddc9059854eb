package manager

import (
	"github.com/mcp-subagent/mcp-subagent/agent"
	"github.com/mcp-subagent/mcp-subagent/manager/authority"
	"github.com/mcp-subagent/mcp-subagent/manager/wording"
	"github.com/mcp-subagent/mcp-subagent/seam"
)

// Delivery says how a report reaches the parent.
type Delivery string

const (
	DeliveryQuiet    Delivery = "quiet"     // injected, no parent turn of its own
	DeliveryNextStep Delivery = "next-step" // an ordinary parent turn
)

// ReportFrom delivers a live child's report to its persisted parent. It
// does not end the child's turn.
func (m *Manager) ReportFrom(caller seam.ParentRef, content string, delivery Delivery) (string, error) {
	m.mu.Lock()
	a := m.live[caller.AgentID]
	m.mu.Unlock()
	var self *seam.Header
	if a != nil {
		self = &a.hdr
	}
	if err := authority.Report(caller, self); err != nil {
		return "", err
	}
	text := wording.Report(a.hdr.ID, content)
	if a.hdr.Parent == seam.PrincipalAddress(a.hdr.Principal) {
		if err := m.deliver(a.hdr, seam.Notice{Source: agent.SourceReport, Text: text}); err != nil {
			return "", err
		}
		return newMessageID(), nil
	}
	m.mu.Lock()
	pa := m.live[a.hdr.Parent]
	m.mu.Unlock()
	if pa == nil {
		return "", &seam.Error{Code: seam.CodeParentUnavailable, AgentID: a.hdr.ID,
			Message: "your parent is not running, so the report cannot be delivered; put the result in your final answer instead"}
	}
	var id string
	var ok bool
	if delivery == DeliveryQuiet {
		id, ok = pa.inject(text, agent.SourceReport)
	} else {
		id, _, _, ok = pa.admit(text, agent.SourceReport, false)
	}
	if !ok {
		return "", &seam.Error{Code: seam.CodeParentUnavailable, AgentID: a.hdr.ID, Message: "your parent is finishing and cannot take the report"}
	}
	if err := pa.durable(); err != nil { // the id is handed out: commit first
		return "", err
	}
	m.signalAddr(a.hdr.Parent)
	return id, nil
}
