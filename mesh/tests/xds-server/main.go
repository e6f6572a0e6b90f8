// Command dpukit-xds-server is the xDS control plane of dpukit's mesh tests:
// go-control-plane's snapshot cache and ADS server (state of the world, v3)
// on a gRPC port, and a small HTTP control port where a test POSTs snapshots
// in Envoy's JSON and reads back, per node and resource type, what the
// proxies ACKed and NACKed. Secrets are served on the ADS stream and by
// SecretDiscoveryService (StreamSecrets) on the same port, and with --sds-unix
// on a Unix socket too, as istio-agent serves them to its proxy.
//
//	dpukit-xds-server --xds 127.0.0.1:18000 --control 127.0.0.1:0 [--sds-unix PATH]
//
// It prints "xds listening on ADDR", "control listening on ADDR" (and "sds
// listening on PATH") once they accept, and stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	secret "github.com/envoyproxy/go-control-plane/envoy/service/secret/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
)

func main() {
	xdsAddr := flag.String("xds", "127.0.0.1:0", "address of the ADS gRPC server (port 0: any free port)")
	controlAddr := flag.String("control", "127.0.0.1:0", "address of the HTTP control endpoint (POST /snapshot, GET /status)")
	sdsUnix := flag.String("sds-unix", "", "also serve SecretDiscoveryService on this Unix socket (as istio-agent does)")
	verbose := flag.Bool("v", false, "log go-control-plane's debug messages")
	keepaliveMin := flag.Duration("keepalive-min-time", 15*time.Second,
		"the shortest interval between a client's pings the server permits (keepalive enforcement MinTime)")
	flag.Parse()
	if flag.NArg() != 0 {
		fmt.Fprintf(os.Stderr, "dpukit-xds-server: unexpected argument %q\n", flag.Arg(0))
		os.Exit(2)
	}
	logger := log.New(os.Stderr, "dpukit-xds-server: ", log.LstdFlags|log.Lmicroseconds)
	if err := run(*xdsAddr, *controlAddr, *sdsUnix, *verbose, *keepaliveMin, logger); err != nil {
		logger.Printf("error: %v", err)
		os.Exit(1)
	}
}

func run(xdsAddr, controlAddr, sdsUnix string, verbose bool, keepaliveMin time.Duration, logger *log.Logger) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	status := newStatus()
	snapshots := cache.NewSnapshotCache(true, cache.IDHash{}, cacheLogger{logger, verbose})
	xds := server.NewServer(ctx, holdOnNack{snapshots, status}, status)
	// SecretDiscoveryService is not aggregated: Envoy opens a stream per
	// secret, which an ADS-mode cache would never answer (it waits for a
	// request naming every secret), so secrets have a cache and a status of
	// their own, given the same snapshots.
	sdsStatus := newStatus()
	sdsSnapshots := cache.NewSnapshotCache(false, cache.IDHash{}, cacheLogger{logger, verbose})
	sds := server.NewServer(ctx, holdOnNack{sdsSnapshots, sdsStatus}, sdsStatus)

	// Proxies ping their ADS stream (dpukit-mesh every 30 s unless its ADS
	// cluster's connection_keepalive says otherwise, also while no update
	// flows): permit it, as go-control-plane's example server and istiod do;
	// grpc-go's default (5 min) answers GOAWAY too_many_pings.
	grpcServer := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
		MinTime: keepaliveMin, PermitWithoutStream: true}))
	discovery.RegisterAggregatedDiscoveryServiceServer(grpcServer, xds)
	secret.RegisterSecretDiscoveryServiceServer(grpcServer, sds)
	xdsListener, err := net.Listen("tcp", xdsAddr)
	if err != nil {
		return fmt.Errorf("--xds %s: %w", xdsAddr, err)
	}
	var sdsServer *grpc.Server
	var sdsListener net.Listener
	if sdsUnix != "" {
		sdsServer = grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: keepaliveMin, PermitWithoutStream: true}))
		secret.RegisterSecretDiscoveryServiceServer(sdsServer, sds)
		if sdsListener, err = net.Listen("unix", sdsUnix); err != nil {
			return fmt.Errorf("--sds-unix %s: %w", sdsUnix, err)
		}
	}
	controlListener, err := net.Listen("tcp", controlAddr)
	if err != nil {
		return fmt.Errorf("--control %s: %w", controlAddr, err)
	}
	control := &http.Server{Handler: controlHandler(ctx, []cache.SnapshotCache{snapshots, sdsSnapshots},
		[]*Status{status, sdsStatus}, logger)}

	errs := make(chan error, 3)
	go func() { errs <- grpcServer.Serve(xdsListener) }()
	go func() { errs <- control.Serve(controlListener) }()
	fmt.Printf("xds listening on %s\ncontrol listening on %s\n", xdsListener.Addr(), controlListener.Addr())
	if sdsServer != nil {
		go func() { errs <- sdsServer.Serve(sdsListener) }()
		fmt.Printf("sds listening on %s\n", sdsUnix)
	}
	os.Stdout.Sync()

	select {
	case <-ctx.Done():
		logger.Printf("stopping")
	case err = <-errs:
	}
	control.Close()
	grpcServer.Stop()
	if sdsServer != nil {
		sdsServer.Stop() // removes nothing: the socket file is the caller's
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// cacheLogger passes go-control-plane's messages to the log; debug ones only with -v.
type cacheLogger struct {
	*log.Logger
	verbose bool
}

func (l cacheLogger) Debugf(format string, args ...interface{}) {
	if l.verbose {
		l.Printf("debug: "+format, args...)
	}
}
func (l cacheLogger) Infof(format string, args ...interface{}) {
	if l.verbose {
		l.Printf("info: "+format, args...)
	}
}
func (l cacheLogger) Warnf(format string, args ...interface{})  { l.Printf("warning: "+format, args...) }
func (l cacheLogger) Errorf(format string, args ...interface{}) { l.Printf("error: "+format, args...) }
