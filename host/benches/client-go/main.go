// Command client-go-peer is the client-go side of kubewasm's side-by-side benchmarks: a
// SharedIndexInformer for Pods (the usual typed informer, namespace index included) against
// the API server double the Rust benchmark serves, fed the same recorded stream as kubewasm
// and kube-rs.
//
// It talks over stdout, one line per fact: "synced" once the informer has synced, then
//   - throughput: "done" once -events add, update and delete notifications have arrived;
//   - memory: "steady BYTES" (live heap held by the informer after a GC), then, once
//     -relist updates have arrived after the Rust side forced a relist, "peak BYTES" (the
//     highest heap in use sampled every millisecond during it, garbage included, as Go
//     holds it) and "after BYTES" (live heap after a GC).
//
// With -metadata it runs client-go's metadata informer instead (metadatainformer: pods'
// metadata only, asked as PartialObjectMetadata, which the double honours).
//
// With -protobuf it asks for protobuf, as client-go can of a real API server. The double
// serves JSON only, so the benchmark puts this program's -mode front (front.go) between them:
// it prints "listening URL" and answers every request in protobuf.
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/metadata/metadatainformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

func live() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "client-go-peer:", err)
	os.Exit(1)
}

func main() {
	server := flag.String("server", "", "URL of the API server double")
	mode := flag.String("mode", "throughput", "throughput, memory, or front (the protobuf front of -server)")
	protobuf := flag.Bool("protobuf", false, "ask -server for protobuf, as client-go does against a real API server")
	events := flag.Int64("events", 0, "throughput: notifications to wait for")
	relist := flag.Int64("relist", 0, "memory: updates that mark the relist complete")
	metadataOnly := flag.Bool("metadata", false, "run the metadata informer (pods' metadata only)")
	flag.Parse()
	if *server == "" {
		fmt.Fprintln(os.Stderr, "client-go-peer: -server is required")
		os.Exit(2)
	}

	if *mode == "front" {
		serveFront(*server)
		return
	}

	baseline := live()
	config := &rest.Config{Host: *server, QPS: -1}
	if *protobuf {
		config.ContentType = protobufType
		config.AcceptContentTypes = protobufType + ",application/json"
	}
	var informer cache.SharedIndexInformer
	var start func(<-chan struct{})
	if *metadataOnly {
		client, err := metadata.NewForConfig(config)
		if err != nil {
			fail(err)
		}
		factory := metadatainformer.NewSharedInformerFactory(client, 0)
		pods := schema.GroupVersionResource{Version: "v1", Resource: "pods"}
		informer = factory.ForResource(pods).Informer()
		start = factory.Start
	} else {
		client, err := kubernetes.NewForConfig(config)
		if err != nil {
			fail(err)
		}
		factory := informers.NewSharedInformerFactory(client, 0)
		informer = factory.Core().V1().Pods().Informer()
		start = factory.Start
	}
	var count, updates atomic.Int64
	done := make(chan struct{})
	relisted := make(chan struct{})
	note := func() {
		if n := count.Add(1); *mode == "throughput" && n == *events {
			close(done)
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) { note() },
		UpdateFunc: func(old, new interface{}) {
			note()
			if n := updates.Add(1); *mode == "memory" && n == *relist {
				close(relisted)
			}
		},
		DeleteFunc: func(obj interface{}) { note() },
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "client-go-peer:", err)
		os.Exit(1)
	}
	stop := make(chan struct{})
	start(stop)
	if !cache.WaitForCacheSync(stop, informer.HasSynced) {
		fmt.Fprintln(os.Stderr, "client-go-peer: never synced")
		os.Exit(1)
	}
	if *mode == "throughput" {
		// Initial adds are not part of the stream being timed.
		count.Store(0)
		fmt.Println("synced")
		<-done
		fmt.Println("done")
		return
	}
	fmt.Println("synced")
	fmt.Printf("steady %d\n", live()-baseline)
	var peak uint64
	for sampling := true; sampling; {
		select {
		case <-relisted:
			sampling = false
		case <-time.After(time.Millisecond):
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak {
				peak = m.HeapAlloc
			}
		}
	}
	fmt.Printf("peak %d\n", peak-baseline)
	fmt.Printf("after %d\n", live()-baseline)
}
