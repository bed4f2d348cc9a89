"""
DaemonSets, Jobs and CronJobs through the official Python client (Debian's python3-kubernetes),
against a real server that test/e2e/cronjobs.test.ts starts: list and read each kind, with their
specs and statuses deserialized into the client's typed models (which refuse a status that lacks a
required field, such as a DaemonSet's desiredNumberScheduled).

Usage: /usr/bin/python3 test/python/batch_test.py KUBECONFIG NAMESPACE DAEMONSET JOB CRONJOB
Every check raises on failure; the last line on success is `PYTHON-SUMMARY {"checks": N}`.
"""

import json
import sys

from kubernetes import client, config

CHECKS = 0


def check(condition, what):
    global CHECKS
    CHECKS += 1
    if not condition:
        raise AssertionError(what)


def main():
    kubeconfig, namespace, ds_name, job_name, cj_name = sys.argv[1:6]
    api_client = config.new_client_from_config(config_file=kubeconfig)
    apps = client.AppsV1Api(api_client)
    batch = client.BatchV1Api(api_client)

    daemonsets = apps.list_namespaced_daemon_set(namespace)
    check(ds_name in [d.metadata.name for d in daemonsets.items], f'{ds_name} listed: {[d.metadata.name for d in daemonsets.items]}')
    ds = apps.read_namespaced_daemon_set(ds_name, namespace)
    check(ds.status.desired_number_scheduled >= 1, f'desiredNumberScheduled: {ds.status}')
    check(ds.status.number_ready == ds.status.desired_number_scheduled, f'numberReady: {ds.status}')
    check(ds.spec.update_strategy.type == 'RollingUpdate', f'updateStrategy: {ds.spec.update_strategy}')
    check(ds.spec.update_strategy.rolling_update.max_unavailable == 1, f'maxUnavailable: {ds.spec.update_strategy}')
    all_ds = apps.list_daemon_set_for_all_namespaces()
    check(any(d.metadata.name == ds_name for d in all_ds.items), 'listed across namespaces')

    jobs = batch.list_namespaced_job(namespace)
    check(job_name in [j.metadata.name for j in jobs.items], f'{job_name} listed')
    job = batch.read_namespaced_job(job_name, namespace)
    check(job.spec.completions == 1 and job.spec.backoff_limit == 6, f'job defaults: {job.spec}')
    check(job.spec.selector.match_labels.get('batch.kubernetes.io/controller-uid') == job.metadata.uid, f'generated selector: {job.spec.selector}')
    check(job.status.succeeded == 1, f'job status: {job.status}')
    check(any(c.type == 'Complete' and c.status == 'True' for c in job.status.conditions), f'Complete: {job.status.conditions}')
    check(job.status.start_time is not None and job.status.completion_time is not None, 'start and completion times parsed')

    cronjobs = batch.list_namespaced_cron_job(namespace)
    check(cj_name in [c.metadata.name for c in cronjobs.items], f'{cj_name} listed')
    cj = batch.read_namespaced_cron_job(cj_name, namespace)
    check(cj.spec.schedule == '* * * * *', f'schedule: {cj.spec.schedule}')
    check(cj.spec.concurrency_policy == 'Allow' and cj.spec.successful_jobs_history_limit == 5 and cj.spec.failed_jobs_history_limit == 1, f'cronjob defaults: {cj.spec}')
    check(cj.status.last_schedule_time is not None, f'lastScheduleTime: {cj.status}')
    check(cj.spec.job_template.spec.template.spec.containers[0].name == 'main', 'jobTemplate read')

    print('PYTHON-SUMMARY ' + json.dumps({'checks': CHECKS}))


if __name__ == '__main__':
    main()
