/** Manifests the CRD tests share (test/e2e/crds*.test.ts, bench/custom-objects.ts). */

export function widgetCrd(group = 'example.com', options: { categories?: string[]; extraVersion?: boolean; shortNames?: string[] } = {}): object {
  const schema = {
    type: 'object',
    description: 'A Widget is a test custom resource.',
    properties: {
      spec: {
        type: 'object',
        description: 'WidgetSpec is what the widget should be.',
        required: ['size'],
        properties: {
          size: { type: 'string', enum: ['small', 'large'], description: 'How big the widget is.' },
          replicas: { type: 'integer', minimum: 0, default: 1, description: 'How many copies.' },
          color: { type: 'string', description: 'Its color.' },
          labels: { type: 'object', additionalProperties: { type: 'string' } },
          blob: { type: 'string' },
        },
      },
      status: {
        type: 'object',
        properties: {
          replicas: { type: 'integer' },
          phase: { type: 'string' },
        },
      },
    },
  };
  const version = (name: string, storage: boolean) => ({
    name,
    served: true,
    storage,
    schema: { openAPIV3Schema: schema },
    subresources: { status: {}, scale: { specReplicasPath: '.spec.replicas', statusReplicasPath: '.status.replicas' } },
    additionalPrinterColumns: [
      { name: 'Size', type: 'string', jsonPath: '.spec.size', description: 'How big' },
      { name: 'Replicas', type: 'integer', jsonPath: '.spec.replicas' },
      { name: 'Phase', type: 'string', jsonPath: '.status.phase' },
      { name: 'Age', type: 'date', jsonPath: '.metadata.creationTimestamp' },
    ],
  });
  return {
    apiVersion: 'apiextensions.k8s.io/v1',
    kind: 'CustomResourceDefinition',
    metadata: { name: `widgets.${group}` },
    spec: {
      group,
      scope: 'Namespaced',
      names: { plural: 'widgets', singular: 'widget', kind: 'Widget', shortNames: options.shortNames ?? ['wdg'], categories: options.categories ?? ['all'] },
      versions: options.extraVersion ? [version('v1', true), version('v1beta1', false)] : [version('v1', true)],
    },
  };
}

export function widget(name: string, spec: Record<string, unknown>, group = 'example.com', namespace = 'default'): object {
  return { apiVersion: `${group}/v1`, kind: 'Widget', metadata: { name, namespace }, spec };
}
