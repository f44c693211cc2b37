from django.urls import path

from launch import views

urlpatterns = [
    path("api/recipes", views.recipes_api, name="api-recipes"),
    path("api/recipes/export", views.export_api, name="api-recipes-export"),
    path("api/recipes/import", views.import_api, name="api-recipes-import"),
    path("api/recipes/<str:name>", views.recipe_api, name="api-recipe"),
]
