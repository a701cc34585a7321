from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('terminals', '0008_recording'),
    ]

    operations = [
        migrations.AddField(
            model_name='worker',
            name='lost',
            field=models.DateTimeField(blank=True, null=True),
        ),
    ]
