package main

import (
	"context"
	"sort"
	"sync"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/protobuf/proto"
)

// typeNames are the resource types a snapshot carries, by the names the
// control endpoint uses for them.
var typeNames = map[string]resource.Type{
	"listeners": resource.ListenerType,
	"clusters":  resource.ClusterType,
	"routes":    resource.RouteType,
	"endpoints": resource.EndpointType,
}

func shortType(typeURL string) string {
	for name, url := range typeNames {
		if url == typeURL {
			return name
		}
	}
	return typeURL
}

// Nack is one rejection a proxy sent: the version it refused (the one sent
// with the nonce it names), the version it keeps, and its error_detail.
type Nack struct {
	Version     string `json:"version"`
	KeptVersion string `json:"kept_version"`
	Nonce       string `json:"nonce"`
	Code        int32  `json:"code"`
	Message     string `json:"message"`
}

// TypeStatus is what one node did with one resource type.
type TypeStatus struct {
	Sent       string   `json:"sent"`        // the last version sent
	SentNonce  string   `json:"sent_nonce"`  // and its nonce
	Acked      string   `json:"acked"`       // the last version ACKed
	AckedNonce string   `json:"acked_nonce"` // the nonce that ACK named
	Requests   int      `json:"requests"`
	Subscribed []string `json:"subscribed"` // resource names of the last request (empty: wildcard)
	Nacks      []Nack   `json:"nacks"`
}

// NodeStatus is one node's xDS streams and resource types.
type NodeStatus struct {
	Cluster       string                 `json:"cluster"` // node.cluster as the proxy sent it
	Delta         bool                   `json:"delta"`   // its last stream is incremental (delta) xDS
	StreamsOpened int                    `json:"streams_opened"`
	StreamsOpen   int                    `json:"streams_open"`
	Types         map[string]*TypeStatus `json:"types"`
}

// Status records, from the server's callbacks, every node's ACKs and NACKs.
// The methods not overridden come from CallbackFuncs (no-ops).
type Status struct {
	server.CallbackFuncs
	mu    sync.Mutex
	nodes map[string]*NodeStatus
	// Per stream: its node, and per type the version sent with each nonce
	// (nonces are numbered per stream, so a NACK names its version here).
	streamNode map[int64]string
	sent       map[int64]map[string]map[string]string
	// The version last sent per node and type, for holdOnNack.
	lastSent map[string]map[string]string
	// The same for delta streams, numbered apart from the others (a delta
	// request names its node only on the stream's first message).
	deltaNode map[int64]string
	deltaSent map[int64]map[string]map[string]string
}

func newStatus() *Status {
	return &Status{nodes: map[string]*NodeStatus{}, streamNode: map[int64]string{},
		sent: map[int64]map[string]map[string]string{}, lastSent: map[string]map[string]string{},
		deltaNode: map[int64]string{}, deltaSent: map[int64]map[string]map[string]string{}}
}

func (s *Status) node(id string) *NodeStatus {
	n, ok := s.nodes[id]
	if !ok {
		n = &NodeStatus{Types: map[string]*TypeStatus{}}
		s.nodes[id] = n
	}
	return n
}

func (n *NodeStatus) typ(typeURL string) *TypeStatus {
	name := shortType(typeURL)
	t, ok := n.Types[name]
	if !ok {
		t = &TypeStatus{Subscribed: []string{}, Nacks: []Nack{}}
		n.Types[name] = t
	}
	return t
}

func (s *Status) OnStreamOpen(context.Context, int64, string) error { return nil }

func (s *Status) OnStreamClosed(id int64, _ *core.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node, ok := s.streamNode[id]; ok {
		s.node(node).StreamsOpen--
	}
	delete(s.streamNode, id)
	delete(s.sent, id)
}

func (s *Status) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeID := req.GetNode().GetId()
	n := s.node(nodeID)
	if _, known := s.streamNode[id]; !known {
		s.streamNode[id] = nodeID
		n.StreamsOpened++
		n.StreamsOpen++
		n.Cluster = req.GetNode().GetCluster()
		n.Delta = false
	}
	t := n.typ(req.GetTypeUrl())
	t.Requests++
	t.Subscribed = append([]string{}, req.GetResourceNames()...)
	sort.Strings(t.Subscribed)
	switch {
	case req.GetErrorDetail() != nil:
		t.Nacks = append(t.Nacks, Nack{
			Version:     s.sent[id][req.GetTypeUrl()][req.GetResponseNonce()],
			KeptVersion: req.GetVersionInfo(),
			Nonce:       req.GetResponseNonce(),
			Code:        req.GetErrorDetail().GetCode(),
			Message:     req.GetErrorDetail().GetMessage(),
		})
	case req.GetResponseNonce() != "":
		t.Acked = req.GetVersionInfo()
		t.AckedNonce = req.GetResponseNonce()
	}
	return nil
}

func (s *Status) OnStreamResponse(_ context.Context, id int64, req *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeID := req.GetNode().GetId()
	t := s.node(nodeID).typ(resp.GetTypeUrl())
	t.Sent, t.SentNonce = resp.GetVersionInfo(), resp.GetNonce()
	if s.sent[id] == nil {
		s.sent[id] = map[string]map[string]string{}
	}
	if s.sent[id][resp.GetTypeUrl()] == nil {
		s.sent[id][resp.GetTypeUrl()] = map[string]string{}
	}
	s.sent[id][resp.GetTypeUrl()][resp.GetNonce()] = resp.GetVersionInfo()
	s.setLastSent(nodeID, resp.GetTypeUrl(), resp.GetVersionInfo())
}

func (s *Status) setLastSent(nodeID, typeURL, version string) {
	if s.lastSent[nodeID] == nil {
		s.lastSent[nodeID] = map[string]string{}
	}
	s.lastSent[nodeID][typeURL] = version
}

func (s *Status) OnDeltaStreamOpen(context.Context, int64, string) error { return nil }

func (s *Status) OnDeltaStreamClosed(id int64, _ *core.Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node, ok := s.deltaNode[id]; ok {
		s.node(node).StreamsOpen--
	}
	delete(s.deltaNode, id)
	delete(s.deltaSent, id)
}

// OnStreamDeltaRequest: a delta request carries no version; its nonce names
// the response it ACKs or NACKs, whose system_version_info was recorded.
func (s *Status) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeID, known := s.deltaNode[id]
	if !known {
		nodeID = req.GetNode().GetId()
		s.deltaNode[id] = nodeID
	}
	n := s.node(nodeID)
	if !known {
		n.StreamsOpened++
		n.StreamsOpen++
		n.Cluster = req.GetNode().GetCluster()
		n.Delta = true
	}
	t := n.typ(req.GetTypeUrl())
	t.Requests++
	names := map[string]bool{}
	for _, r := range t.Subscribed {
		names[r] = true
	}
	for _, r := range req.GetResourceNamesSubscribe() {
		names[r] = true
	}
	for _, r := range req.GetResourceNamesUnsubscribe() {
		delete(names, r)
	}
	t.Subscribed = t.Subscribed[:0]
	for r := range names {
		t.Subscribed = append(t.Subscribed, r)
	}
	sort.Strings(t.Subscribed)
	version := s.deltaSent[id][req.GetTypeUrl()][req.GetResponseNonce()]
	switch {
	case req.GetErrorDetail() != nil:
		t.Nacks = append(t.Nacks, Nack{Version: version, KeptVersion: t.Acked, Nonce: req.GetResponseNonce(),
			Code: req.GetErrorDetail().GetCode(), Message: req.GetErrorDetail().GetMessage()})
	case req.GetResponseNonce() != "":
		t.Acked, t.AckedNonce = version, req.GetResponseNonce()
	}
	return nil
}

func (s *Status) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeID := s.deltaNode[id]
	t := s.node(nodeID).typ(resp.GetTypeUrl())
	t.Sent, t.SentNonce = resp.GetSystemVersionInfo(), resp.GetNonce()
	if s.deltaSent[id] == nil {
		s.deltaSent[id] = map[string]map[string]string{}
	}
	if s.deltaSent[id][resp.GetTypeUrl()] == nil {
		s.deltaSent[id][resp.GetTypeUrl()] = map[string]string{}
	}
	s.deltaSent[id][resp.GetTypeUrl()][resp.GetNonce()] = resp.GetSystemVersionInfo()
	s.setLastSent(nodeID, resp.GetTypeUrl(), resp.GetSystemVersionInfo())
}

// Snapshot of the status for the control endpoint's GET /status.
func (s *Status) copy() map[string]NodeStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]NodeStatus, len(s.nodes))
	for id, n := range s.nodes {
		c := NodeStatus{Cluster: n.Cluster, Delta: n.Delta, StreamsOpened: n.StreamsOpened, StreamsOpen: n.StreamsOpen,
			Types: map[string]*TypeStatus{}}
		for name, t := range n.Types {
			tc := *t
			tc.Nacks = append([]Nack{}, t.Nacks...)
			c.Types[name] = &tc
		}
		out[id] = c
	}
	return out
}

func (s *Status) lastSentVersion(nodeID, typeURL string) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.lastSent[nodeID][typeURL]
	return v, ok
}

// holdOnNack is the snapshot cache with one change: a NACK of the version the
// cache holds now waits for the next snapshot. The plain cache answers a NACK
// (whose version_info is the last good version, not the current one) at once
// with the same rejected resources, and the proxy and the server would trade
// them forever (go-control-plane issue #962); Istio and Contour hold the watch.
type holdOnNack struct {
	cache.SnapshotCache
	status *Status
}

func (h holdOnNack) CreateWatch(req *cache.Request, sub cache.Subscription, value chan cache.Response) (func(), error) {
	if req.GetErrorDetail() != nil {
		if snap, err := h.GetSnapshot(req.GetNode().GetId()); err == nil {
			current := snap.GetVersion(req.GetTypeUrl())
			if rejected, ok := h.status.lastSentVersion(req.GetNode().GetId(), req.GetTypeUrl()); ok && rejected == current {
				held := proto.Clone(req).(*cache.Request)
				held.VersionInfo = current
				return h.SnapshotCache.CreateWatch(held, sub, value)
			}
		}
	}
	return h.SnapshotCache.CreateWatch(req, sub, value)
}
