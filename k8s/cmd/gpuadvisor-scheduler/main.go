// gpuadvisor-scheduler is kube-scheduler with the GPUAdvisor plugin registered (k8s/plugin/gpuadvisor): the same
// command, flags and configuration file, plus a plugin that profiles may enable.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"

	"gpuadvisor/k8s/plugin/gpuadvisor"
)

func main() {
	command := app.NewSchedulerCommand(app.WithPlugin(gpuadvisor.Name, gpuadvisor.New))
	os.Exit(cli.Run(command))
}
