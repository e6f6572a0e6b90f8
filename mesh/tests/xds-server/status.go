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
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

// typeNames are the resource types a snapshot carries, by the names the
// control endpoint uses for them.
var typeNames = map[string]resource.Type{
	"listeners": resource.ListenerType,
	"clusters":  resource.ClusterType,
	"routes":    resource.RouteType,
	"endpoints": resource.EndpointType,
	"secrets":   resource.SecretType,
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
	// State of the world and delta streams (go-control-plane numbers them apart).
	sotw, delta streams
	// The version last sent per node and type, for holdOnNack.
	lastSent map[string]map[string]string
}

// streams are the open streams of one protocol: each one's node (a request
// may name it only on a stream's first message), and per type the version
// sent with each nonce (nonces are numbered per stream; a delta request
// carries no version, and any ACK or NACK names its response by nonce).
type streams struct {
	node map[int64]string
	sent map[int64]map[string]map[string]string
}

func newStreams() streams {
	return streams{node: map[int64]string{}, sent: map[int64]map[string]map[string]string{}}
}

func newStatus() *Status {
	return &Status{nodes: map[string]*NodeStatus{}, sotw: newStreams(), delta: newStreams(),
		lastSent: map[string]map[string]string{}}
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

// stream is the node of stream id; a stream seen for the first time is counted.
func (s *Status) stream(st streams, id int64, node *core.Node, delta bool) *NodeStatus {
	nodeID, known := st.node[id]
	if !known {
		nodeID = node.GetId()
		st.node[id] = nodeID
	}
	n := s.node(nodeID)
	if !known {
		n.StreamsOpened++
		n.StreamsOpen++
		n.Cluster = node.GetCluster()
		n.Delta = delta
	}
	return n
}

func (s *Status) closed(st streams, id int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if node, ok := st.node[id]; ok {
		s.node(node).StreamsOpen--
	}
	delete(st.node, id)
	delete(st.sent, id)
}

// answer records what a request says of the response named by nonce: a NACK
// of `version` (keeping `kept`) with its error_detail, or an ACK of `version`.
func (t *TypeStatus) answer(nonce string, detail *rpcstatus.Status, version, kept string) {
	t.Requests++
	switch {
	case detail != nil:
		t.Nacks = append(t.Nacks, Nack{Version: version, KeptVersion: kept, Nonce: nonce, Code: detail.GetCode(),
			Message: detail.GetMessage()})
	case nonce != "":
		t.Acked, t.AckedNonce = version, nonce
	}
}

// sent records a response of stream id.
func (s *Status) sent(st streams, id int64, typeURL, version, nonce string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	nodeID := st.node[id]
	t := s.node(nodeID).typ(typeURL)
	t.Sent, t.SentNonce = version, nonce
	if st.sent[id] == nil {
		st.sent[id] = map[string]map[string]string{}
	}
	if st.sent[id][typeURL] == nil {
		st.sent[id][typeURL] = map[string]string{}
	}
	st.sent[id][typeURL][nonce] = version
	if s.lastSent[nodeID] == nil {
		s.lastSent[nodeID] = map[string]string{}
	}
	s.lastSent[nodeID][typeURL] = version
}

func (s *Status) OnStreamOpen(context.Context, int64, string) error { return nil }

func (s *Status) OnStreamClosed(id int64, _ *core.Node) { s.closed(s.sotw, id) }

func (s *Status) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.stream(s.sotw, id, req.GetNode(), false).typ(req.GetTypeUrl())
	t.Subscribed = append([]string{}, req.GetResourceNames()...)
	sort.Strings(t.Subscribed)
	// An ACK's version_info is the version it takes; a NACK's, the one it keeps.
	version := req.GetVersionInfo()
	if req.GetErrorDetail() != nil {
		version = s.sotw.sent[id][req.GetTypeUrl()][req.GetResponseNonce()]
	}
	t.answer(req.GetResponseNonce(), req.GetErrorDetail(), version, req.GetVersionInfo())
	return nil
}

func (s *Status) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	s.sent(s.sotw, id, resp.GetTypeUrl(), resp.GetVersionInfo(), resp.GetNonce())
}

func (s *Status) OnDeltaStreamOpen(context.Context, int64, string) error { return nil }

func (s *Status) OnDeltaStreamClosed(id int64, _ *core.Node) { s.closed(s.delta, id) }

func (s *Status) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.stream(s.delta, id, req.GetNode(), true).typ(req.GetTypeUrl())
	names := map[string]bool{}
	for _, r := range append(t.Subscribed, req.GetResourceNamesSubscribe()...) {
		names[r] = true
	}
	for _, r := range req.GetResourceNamesUnsubscribe() {
		delete(names, r)
	}
	t.Subscribed = []string{}
	for r := range names {
		t.Subscribed = append(t.Subscribed, r)
	}
	sort.Strings(t.Subscribed)
	version := s.delta.sent[id][req.GetTypeUrl()][req.GetResponseNonce()]
	t.answer(req.GetResponseNonce(), req.GetErrorDetail(), version, t.Acked)
	return nil
}

func (s *Status) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	s.sent(s.delta, id, resp.GetTypeUrl(), resp.GetSystemVersionInfo(), resp.GetNonce())
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
