package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tls "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// SnapshotRequest is the body of POST /snapshot: one node's whole
// configuration, each resource in Envoy's JSON for its message.
type SnapshotRequest struct {
	Version   string            `json:"version"`
	NodeID    string            `json:"node_id"`
	Listeners []json.RawMessage `json:"listeners"`
	Clusters  []json.RawMessage `json:"clusters"`
	Routes    []json.RawMessage `json:"routes"`
	Endpoints []json.RawMessage `json:"endpoints"`
	Secrets   []json.RawMessage `json:"secrets"`
}

// Strict, as Envoy reads JSON: an unknown field is an error; Any's
// typed_config resolves through the types the extension imports registered.
var unmarshal = protojson.UnmarshalOptions{Resolver: protoregistry.GlobalTypes}

func decode(kind string, raw []json.RawMessage, empty func() proto.Message) ([]types.Resource, error) {
	out := make([]types.Resource, 0, len(raw))
	for i, r := range raw {
		m := empty()
		if err := unmarshal.Unmarshal(r, m); err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", kind, i, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// toSnapshot converts a POSTed snapshot into go-control-plane's, checked by
// its Consistent (every route and endpoint set is referenced, and only those).
func toSnapshot(req *SnapshotRequest) (*cache.Snapshot, error) {
	if req.Version == "" || req.NodeID == "" {
		return nil, fmt.Errorf("version and node_id are required")
	}
	resources := map[resource.Type][]types.Resource{}
	for _, part := range []struct {
		kind  string
		raw   []json.RawMessage
		empty func() proto.Message
	}{
		{"listeners", req.Listeners, func() proto.Message { return &listener.Listener{} }},
		{"clusters", req.Clusters, func() proto.Message { return &cluster.Cluster{} }},
		{"routes", req.Routes, func() proto.Message { return &route.RouteConfiguration{} }},
		{"endpoints", req.Endpoints, func() proto.Message { return &endpoint.ClusterLoadAssignment{} }},
		{"secrets", req.Secrets, func() proto.Message { return &tls.Secret{} }},
	} {
		decoded, err := decode(part.kind, part.raw, part.empty)
		if err != nil {
			return nil, err
		}
		resources[typeNames[part.kind]] = decoded
	}
	snap, err := cache.NewSnapshot(req.Version, resources)
	if err != nil {
		return nil, err
	}
	if err := snap.Consistent(); err != nil {
		return nil, fmt.Errorf("inconsistent snapshot: %w", err)
	}
	return snap, nil
}

// controlHandler serves the control endpoint: a POSTed snapshot goes into
// every cache, and GET /status merges what each server saw.
func controlHandler(ctx context.Context, caches []cache.SnapshotCache, statuses []*Status, logger *log.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /snapshot", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req SnapshotRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			http.Error(w, "snapshot: "+err.Error(), http.StatusBadRequest)
			return
		}
		snap, err := toSnapshot(&req)
		if err != nil {
			http.Error(w, "snapshot: "+err.Error(), http.StatusBadRequest)
			return
		}
		for _, snapshots := range caches {
			if err := snapshots.SetSnapshot(ctx, req.NodeID, snap); err != nil {
				http.Error(w, "set snapshot: "+err.Error(), http.StatusInternalServerError)
				return
			}
		}
		logger.Printf("node %s: snapshot %s (%d listeners, %d clusters, %d routes, %d endpoints, %d secrets)", req.NodeID,
			req.Version, len(req.Listeners), len(req.Clusters), len(req.Routes), len(req.Endpoints), len(req.Secrets))
		writeJSON(w, map[string]string{"node_id": req.NodeID, "version": req.Version})
	})
	mux.HandleFunc("GET /status", func(w http.ResponseWriter, r *http.Request) {
		nodes := map[string]NodeStatus{}
		for _, status := range statuses {
			for id, n := range status.copy() {
				merged, ok := nodes[id]
				if !ok {
					nodes[id] = n
					continue
				}
				merged.StreamsOpened += n.StreamsOpened
				merged.StreamsOpen += n.StreamsOpen
				for name, t := range n.Types {
					if _, dup := merged.Types[name]; !dup || t.Requests > 0 {
						merged.Types[name] = t
					}
				}
				nodes[id] = merged
			}
		}
		writeJSON(w, map[string]any{"nodes": nodes})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}
