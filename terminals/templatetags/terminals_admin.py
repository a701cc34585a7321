"""What the admin shows besides the models: a warning while users are not separated."""

from django import template

from terminals.environment import separation_warning

register = template.Library()


@register.simple_tag(name="separation_warning")
def separation_warning_tag() -> str:
    return separation_warning()
