// podresources-standin serves the kubelet's pod-resources API (k8s.io/kubelet/pkg/apis/podresources/v1, the
// generated PodResourcesLister service and messages the kubelet itself serves) on a unix socket, answering from a
// JSON file instead of a kubelet's pod manager and device plugins. gpuadvisor's tests run the collector's
// pod-resources client against it: the wire format, the service and method names and the errors are upstream's.
//
//	podresources-standin --socket DIR/kubelet.sock --state pods.json [--delay 0s]
//
// The state file is a ListPodResourcesResponse in protobuf's JSON mapping, read again on every call (a test
// changes it to make pods appear or vanish), e.g.
//
//	{"pod_resources": [{"name": "train-0", "namespace": "ml", "containers": [{"name": "main",
//	  "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-…"]}]}]}]}
//
// --delay holds every answer back (a hung kubelet: the caller's deadline ends the call). The socket is removed on SIGTERM or
// SIGINT. "ready" is printed on stdout once it accepts connections.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

type server struct {
	podresourcesv1.UnimplementedPodResourcesListerServer
	state string
	delay time.Duration
}

func (s *server) read() (*podresourcesv1.ListPodResourcesResponse, error) {
	// A hung kubelet: the answer is held back whatever the caller's deadline, so the caller's own deadline ends
	// the call (a handler returning at the deadline would race it with a stream reset).
	time.Sleep(s.delay)
	data, err := os.ReadFile(s.state)
	if err != nil {
		return nil, fmt.Errorf("state file: %w", err)
	}
	var listing podresourcesv1.ListPodResourcesResponse
	if err := protojson.Unmarshal(data, &listing); err != nil {
		return nil, fmt.Errorf("state file %s: %w", s.state, err)
	}
	return &listing, nil
}

func (s *server) List(_ context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	return s.read()
}

// Get answers as the kubelet does (pkg/kubelet/apis/podresources/server_v1.go): a plain error naming the pod when
// it does not know it.
func (s *server) Get(_ context.Context, req *podresourcesv1.GetPodResourcesRequest) (*podresourcesv1.GetPodResourcesResponse, error) {
	listing, err := s.read()
	if err != nil {
		return nil, err
	}
	for _, pod := range listing.GetPodResources() {
		if pod.GetName() == req.GetPodName() && pod.GetNamespace() == req.GetPodNamespace() {
			return &podresourcesv1.GetPodResourcesResponse{PodResources: pod}, nil
		}
	}
	return nil, fmt.Errorf("pod %s in namespace %s not found", req.GetPodName(), req.GetPodNamespace())
}

func run() error {
	socket := flag.String("socket", "", "unix socket to serve on (created; an existing file there is replaced)")
	state := flag.String("state", "", "JSON file holding a ListPodResourcesResponse, read on every call")
	delay := flag.Duration("delay", 0, "hold every answer back this long")
	flag.Parse()
	if *socket == "" || *state == "" {
		return errors.New("--socket and --state are required")
	}
	if err := os.Remove(*socket); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("--socket: %w", err)
	}
	listener, err := net.Listen("unix", *socket)
	if err != nil {
		return fmt.Errorf("--socket: %w", err)
	}
	grpcServer := grpc.NewServer()
	podresourcesv1.RegisterPodResourcesListerServer(grpcServer, &server{state: *state, delay: *delay})
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-stop
		grpcServer.Stop()
	}()
	fmt.Println("ready")
	serveErr := grpcServer.Serve(listener)
	_ = os.Remove(*socket)
	return serveErr
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(2)
	}
}
